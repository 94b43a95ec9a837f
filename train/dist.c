// dist.c: see dist.h.
#include "dist.h"

#include <string.h>

#ifdef SPINDLE_HAVE_NCCL
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>

// Whether a launcher started this process as an MPI rank: Open MPI's mpirun
// sets OMPI_COMM_WORLD_SIZE, PMIx and PMI launchers (srun, MPICH) PMIX_RANK / PMI_RANK.
static int launched_by_mpi(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_RANK");
}

int dist_init(Dist *d, Status *st) {
    memset(d, 0, sizeof *d);
    d->world = 1;
    if (!launched_by_mpi()) return 0;  // a plain run: one process, no MPI, no NCCL
    int inited = 0;
    if (MPI_Initialized(&inited) != MPI_SUCCESS) return status_fail(st, "MPI_Initialized failed");
    if (!inited && MPI_Init(NULL, NULL) != MPI_SUCCESS) return status_fail(st, "MPI_Init failed");
    d->mpi = !inited;
    if (MPI_Comm_rank(MPI_COMM_WORLD, &d->rank) != MPI_SUCCESS ||
        MPI_Comm_size(MPI_COMM_WORLD, &d->world) != MPI_SUCCESS)
        return status_fail(st, "MPI_Comm_rank / MPI_Comm_size failed");
    // The node-local rank picks the GPU: ranks that share a node (a shared-memory
    // communicator) are numbered 0, 1, ... there.
    MPI_Comm node;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, d->rank, MPI_INFO_NULL, &node) != MPI_SUCCESS ||
        MPI_Comm_rank(node, &d->local_rank) != MPI_SUCCESS)
        return status_fail(st, "MPI_Comm_split_type failed");
    MPI_Comm_free(&node);
    int n_gpu = 0;
    if (cudaGetDeviceCount(&n_gpu) != cudaSuccess || d->local_rank >= n_gpu)
        return status_fail(st, "rank %d: node-local rank %d but %d GPU(s) visible (one rank per GPU)", d->rank,
                           d->local_rank, n_gpu);
    if (cudaSetDevice(d->local_rank) != cudaSuccess)
        return status_fail(st, "rank %d: cudaSetDevice(%d) failed", d->rank, d->local_rank);
    ncclUniqueId id;
    if (d->rank == 0 && ncclGetUniqueId(&id) != ncclSuccess) return status_fail(st, "ncclGetUniqueId failed");
    if (MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS)
        return status_fail(st, "MPI_Bcast of the NCCL unique id failed");
    ncclComm_t comm;
    const ncclResult_t r = ncclCommInitRank(&comm, d->world, id, d->rank);
    if (r != ncclSuccess) return status_fail(st, "ncclCommInitRank: %s", ncclGetErrorString(r));
    d->nccl = comm;
    return 0;
}

// A failed collective cannot be retried and the other ranks may wait in it:
// the message, then MPI_Abort, which ends every rank of the job.
static void nccl_fatal(const Dist *d, const char *what, ncclResult_t r) {
    fprintf(stderr, "spindle: rank %d of %d: %s: %s; stopping every rank (MPI_Abort)\n", d->rank, d->world, what,
            ncclGetErrorString(r));
    if (d->mpi || d->world > 1) MPI_Abort(MPI_COMM_WORLD, 1);
    abort();
}

void dist_allreduce_mean(const Dist *d, float *dev, size_t n) {
    if (!d->nccl || n == 0) return;
    // ncclAvg: the sum scaled by 1/world inside the collective (for one rank, × 1: the value itself).
    const ncclResult_t r = ncclAllReduce(dev, dev, n, ncclFloat32, ncclAvg, (ncclComm_t)d->nccl, 0);
    if (r != ncclSuccess) nccl_fatal(d, "ncclAllReduce", r);
    // An error the communicator met asynchronously (a peer gone, a network
    // failure) shows here rather than as a wait that never ends.
    ncclResult_t async = ncclSuccess;
    if (ncclCommGetAsyncError((ncclComm_t)d->nccl, &async) != ncclSuccess || (async != ncclSuccess && async != ncclInProgress))
        nccl_fatal(d, "the NCCL communicator", async);
}

void dist_finalize(Dist *d) {
    if (d->nccl) ncclCommDestroy((ncclComm_t)d->nccl);
    if (d->mpi) MPI_Finalize();
    memset(d, 0, sizeof *d);
}

void dist_abort(const Dist *d, int rc) {
    if (d->world > 1) {
        fprintf(stderr, "spindle: rank %d of %d failed (exit %d); stopping every rank (MPI_Abort)\n", d->rank, d->world, rc);
        MPI_Abort(MPI_COMM_WORLD, rc);
    }
}
#else
int dist_init(Dist *d, Status *st) {
    (void)st;
    memset(d, 0, sizeof *d);
    d->world = 1;
    return 0;
}

void dist_allreduce_mean(const Dist *d, float *dev, size_t n) { (void)d, (void)dev, (void)n; }
void dist_finalize(Dist *d) { memset(d, 0, sizeof *d); }
void dist_abort(const Dist *d, int rc) { (void)d, (void)rc; }
#endif
