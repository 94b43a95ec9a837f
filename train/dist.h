// dist.h: data-parallel training, one process per GPU. Open MPI launches the
// ranks (`mpirun -np N spindle train ...`, on one node or several) and carries
// exactly one message, NCCL's unique id broadcast from rank 0 (as llm.c sets up
// its communicator); NCCL then all-reduces each trained layer's gradients on
// the device before the clip and AdamW, so every rank applies the same update
// and holds the same parameters. Only with SPINDLE_HAVE_NCCL (cmake
// -DSPINDLE_NCCL=ON, which needs -DSPINDLE_CUDA=ON and MPI); otherwise, and in
// a process not launched by mpirun, every call here is the one-rank case.
#pragma once
#include <stddef.h>

#include "status.h"

typedef struct Dist {
    int rank, world;   // this process and how many there are (0 of 1 without MPI)
    int local_rank;    // the GPU this rank uses (its index among the ranks of its node)
    void *nccl;        // the communicator (ncclComm_t), NULL without NCCL
    int mpi;           // MPI was initialised here
} Dist;

// Sets up d when a launcher started the process as an MPI rank (mpirun sets
// OMPI_COMM_WORLD_SIZE; PMIx / PMI launchers PMIX_RANK / PMI_RANK): MPI_Init,
// rank and world, the node-local rank (which GPU), cudaSetDevice, the unique id
// from rank 0, ncclCommInitRank — `mpirun -np 1` runs the NCCL path on one GPU.
// Otherwise, and in a build without NCCL: rank 0 of 1, no communicator, 0.
// Returns -1 with st saying why on failure.
int dist_init(Dist *d, Status *st);
// dev[0..n) (device floats) = the mean over the ranks, in place, in stream
// order on the default stream (ncclAllReduce with ncclAvg). Without NCCL:
// nothing. With NCCL it runs even for one rank (the same code path), where the
// mean is the value itself. A failed call, or an error the communicator
// reports asynchronously (ncclCommGetAsyncError: a peer gone), prints the
// rank and the error and ends the whole job with MPI_Abort: no rank is left
// waiting in a collective that will not complete.
void dist_allreduce_mean(const Dist *d, float *dev, size_t n);
// Ends the communicator and MPI (after a failure on one rank, dist_abort instead).
void dist_finalize(Dist *d);
// Stops every rank (MPI_Abort) with code rc: a rank that fails while the others
// wait in a collective would leave them hanging. World 1: returns. (A rank
// killed outright, e.g. by SIGKILL, never gets here: Open MPI's mpirun ends
// the job when one of its processes dies; docs/gpu.md.)
void dist_abort(const Dist *d, int rc);
