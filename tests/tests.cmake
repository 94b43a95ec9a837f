# tests.cmake: every ctest. Goldens come from scripts/make-goldens.py
# (HF transformers); each test asserts values, so each can fail.
set(GOLDENS ${CMAKE_SOURCE_DIR}/tests/goldens)
set(TEST_TMP ${CMAKE_BINARY_DIR}/test-tmp)
file(MAKE_DIRECTORY ${TEST_TMP})

add_executable(test_goldens tests/test_goldens.c)
target_link_libraries(test_goldens PRIVATE spindle_data)
file(GLOB golden_cases RELATIVE ${GOLDENS} ${GOLDENS}/*/logits.npy)
foreach(case_file ${golden_cases})
  get_filename_component(case ${case_file} DIRECTORY)
  add_test(NAME golden_${case} COMMAND test_goldens $<TARGET_FILE:spindle> ${GOLDENS}/${case} ${TEST_TMP})
endforeach()
# Oracle goldens: oracle_k{K}_bsel{S}.npy beside a case's logits.npy.
file(GLOB oracle_files RELATIVE ${GOLDENS} ${GOLDENS}/*/oracle_k*_bsel*.npy)
foreach(f ${oracle_files})
  string(REGEX MATCH "^([^/]+)/oracle_k([0-9]+)_bsel([0-9]+)\\.npy$" _ ${f})
  set(case ${CMAKE_MATCH_1})
  add_test(NAME golden_${case}_oracle_k${CMAKE_MATCH_2}_bsel${CMAKE_MATCH_3}
           COMMAND test_goldens $<TARGET_FILE:spindle> ${GOLDENS}/${case} ${TEST_TMP} 2e-3 ${CMAKE_MATCH_2} ${CMAKE_MATCH_3})
endforeach()

add_executable(test_units tests/test_units.c)
target_link_libraries(test_units PRIVATE spindle_data)
add_test(NAME units COMMAND test_units ${TEST_TMP})

add_executable(test_tokenizer tests/test_tokenizer.c)
target_link_libraries(test_tokenizer PRIVATE spindle_model)
add_test(NAME tokenizer COMMAND test_tokenizer ${CMAKE_SOURCE_DIR}/tests/tokenizer)
# The real Gemma 3 270M tokenizer.json (scripts/get-gemma3.sh) against HF tokenizers' ids.
add_test(NAME gemma3_tokenizer COMMAND bash ${CMAKE_SOURCE_DIR}/tests/test_gemma3_tokenizer.sh $<TARGET_FILE:spindle>
         ${CMAKE_SOURCE_DIR}/models/gemma3-270m ${CMAKE_SOURCE_DIR}/tests/tokenizer ${TEST_TMP}/gemma3_tokenizer)
set_tests_properties(gemma3_tokenizer PROPERTIES SKIP_RETURN_CODE 77)

add_executable(test_qwen3next_config tests/test_qwen3next_config.c)
target_link_libraries(test_qwen3next_config PRIVATE spindle_model)
add_test(NAME qwen3next_config COMMAND test_qwen3next_config ${TEST_TMP}/qwen3next_config)
add_executable(test_gemma3_config tests/test_gemma3_config.c)
target_link_libraries(test_gemma3_config PRIVATE spindle_model)
add_test(NAME gemma3_config COMMAND test_gemma3_config fixtures ${CMAKE_SOURCE_DIR}/tests/fixtures ${TEST_TMP})
# The real Gemma 3 270M (scripts/get-gemma3.sh): its layer kinds, window, RoPE bases and scales.
add_test(NAME gemma3_270m_load COMMAND test_gemma3_config real ${CMAKE_SOURCE_DIR}/models/gemma3-270m)
set_tests_properties(gemma3_270m_load PROPERTIES SKIP_RETURN_CODE 77)
# The layer selection of every command on a faked hybrid stack (cli/cli_layers.h).
add_executable(test_cli_layers tests/test_cli_layers.c)
target_link_libraries(test_cli_layers PRIVATE spindle_cli)
add_test(NAME cli_layers COMMAND test_cli_layers ${TEST_TMP})

add_test(NAME parser_refusals COMMAND bash ${CMAKE_SOURCE_DIR}/tests/test_parser_refusals.sh
         $<TARGET_FILE:spindle> ${GOLDENS} ${TEST_TMP}/parser_refusals)

add_test(NAME bad_input COMMAND bash ${CMAKE_SOURCE_DIR}/tests/test_bad_input.sh
         $<TARGET_FILE:spindle> ${GOLDENS} ${TEST_TMP}/bad)

add_executable(test_smollm2 tests/test_smollm2.c)
target_link_libraries(test_smollm2 PRIVATE spindle_data)
add_test(NAME smollm2_vs_transformers COMMAND test_smollm2 $<TARGET_FILE:spindle>
         ${CMAKE_SOURCE_DIR}/models/smollm2 ${GOLDENS}/smollm2 ${TEST_TMP})
set_tests_properties(smollm2_vs_transformers PROPERTIES SKIP_RETURN_CODE 77)

add_test(NAME oracle_cli COMMAND bash ${CMAKE_SOURCE_DIR}/tests/test_oracle_cli.sh
         $<TARGET_FILE:spindle> ${GOLDENS} ${TEST_TMP}/oracle_cli)

add_executable(test_retrieval tests/test_retrieval.c)
target_link_libraries(test_retrieval PRIVATE spindle_eval spindle_data)
add_test(NAME retrieval COMMAND test_retrieval ${CMAKE_SOURCE_DIR}/tests/tokenizer
         ${CMAKE_SOURCE_DIR}/models/smollm2 ${TEST_TMP}/retrieval ${CMAKE_SOURCE_DIR}/corpus/heldout)
set_tests_properties(retrieval PROPERTIES SKIP_RETURN_CODE 77)

add_executable(test_shard tests/test_shard.c)
target_link_libraries(test_shard PRIVATE spindle_data)
add_test(NAME shard COMMAND test_shard unit ${TEST_TMP}/shard)
add_test(NAME teacher_cli COMMAND bash ${CMAKE_SOURCE_DIR}/tests/test_teacher.sh $<TARGET_FILE:spindle>
         $<TARGET_FILE:test_shard> ${GOLDENS} ${TEST_TMP}/teacher)

add_executable(test_indexer tests/test_indexer.c)
target_link_libraries(test_indexer PRIVATE spindle_kernels)
add_test(NAME indexer COMMAND test_indexer)

# The method on a hybrid stack (the tiny Gemma 3 golden): full-attention layers only, end to end.
add_test(NAME hybrid_pipeline COMMAND bash ${CMAKE_SOURCE_DIR}/tests/test_hybrid.sh $<TARGET_FILE:spindle>
         ${GOLDENS} ${TEST_TMP}/hybrid)
add_test(NAME train_resume_export COMMAND bash ${CMAKE_SOURCE_DIR}/tests/test_train.sh
         $<TARGET_FILE:spindle> ${GOLDENS} ${TEST_TMP}/train)
# Online training (no shards): equal to shard training on the same windows and
# seed, exact resume, bad usage, and the hybrid stack's full-attention layers only.
add_test(NAME train_online COMMAND bash ${CMAKE_SOURCE_DIR}/tests/test_train_online.sh
         $<TARGET_FILE:spindle> ${GOLDENS} ${TEST_TMP}/train_online)
# Online training with a retrieval mix (--retrieval-mix) on SmolLM2: kv windows
# and their question positions, exact resume, refusals.
add_test(NAME train_mix COMMAND bash ${CMAKE_SOURCE_DIR}/tests/test_train_mix.sh $<TARGET_FILE:spindle>
         ${CMAKE_SOURCE_DIR}/models/smollm2 ${CMAKE_SOURCE_DIR}/corpus/train ${TEST_TMP}/train_mix)
set_tests_properties(train_mix PROPERTIES SKIP_RETURN_CODE 77)
# Online training on a synthetic model (--synthetic tiny, --random-ids) and
# several sequences per step (--batch): exact resume after a stop or SIGKILL,
# the mean of the gradients, refusals.
add_test(NAME train_synth COMMAND bash ${CMAKE_SOURCE_DIR}/tests/test_train_synth.sh
         $<TARGET_FILE:spindle> ${GOLDENS} ${TEST_TMP}/train_synth)
# Export layouts other stacks read (spindle | dsa | qsa): python/spindle_indexer.py's numpy path
# reproduces spindle's supports and scores; refusals; the safetensors package reads each file's tensors.
add_test(NAME export_layouts COMMAND bash ${CMAKE_SOURCE_DIR}/tests/test_export_layouts.sh
         $<TARGET_FILE:spindle> ${GOLDENS} ${TEST_TMP}/export_layouts)
add_test(NAME export_layouts_safetensors COMMAND bash ${CMAKE_SOURCE_DIR}/tests/test_export_layouts.sh
         $<TARGET_FILE:spindle> ${GOLDENS} ${TEST_TMP}/export_layouts_st names)
set_tests_properties(export_layouts export_layouts_safetensors PROPERTIES SKIP_RETURN_CODE 77)
# Training objectives (query | block | mix): config and export carry them, exact
# resume of a block run, refusals of bad or conflicting flags.
add_test(NAME train_objective COMMAND bash ${CMAKE_SOURCE_DIR}/tests/test_train_objective.sh
         $<TARGET_FILE:spindle> ${GOLDENS} ${TEST_TMP}/train_objective)

add_test(NAME reports COMMAND bash ${CMAKE_SOURCE_DIR}/tests/test_reports.sh ${CMAKE_SOURCE_DIR} ${TEST_TMP}/reports)

if(SPINDLE_CUDA)
  add_executable(test_cuda_twins tests/test_cuda_twins.c tests/twins/common.c tests/twins/oracle.c
    tests/twins/indexer.c tests/twins/sdpa.c tests/twins/score.c tests/twins/deltanet.c tests/twins/hybrid.c
    tests/twins/wgmma.c)
  target_include_directories(test_cuda_twins PRIVATE tests/twins)
  target_link_libraries(test_cuda_twins PRIVATE spindle_cli)
  add_test(NAME cuda_twins COMMAND test_cuda_twins)
  set_tests_properties(cuda_twins PROPERTIES SKIP_RETURN_CODE 77)
  # `spindle logits --device cuda` (fp32 and bf16) on every dense golden case.
  add_test(NAME goldens_cuda COMMAND bash ${CMAKE_SOURCE_DIR}/tests/test_goldens_cuda.sh
           $<TARGET_FILE:spindle> ${GOLDENS} ${TEST_TMP}/goldens_cuda)
  set_tests_properties(goldens_cuda PROPERTIES SKIP_RETURN_CODE 77)
  # The same cases with the GPU pass's row-local work in chunks of 37 rows:
  # every op, the DeltaNet state and conv history cross chunk boundaries.
  add_test(NAME goldens_cuda_rows37 COMMAND bash ${CMAKE_SOURCE_DIR}/tests/test_goldens_cuda.sh
           $<TARGET_FILE:spindle> ${GOLDENS} ${TEST_TMP}/goldens_cuda_rows37)
  set_tests_properties(goldens_cuda_rows37 PROPERTIES SKIP_RETURN_CODE 77 ENVIRONMENT SPINDLE_ROW_CHUNK=37)
  # The time-to-first-token pass (its last layer cut to the last row chunk) against the whole pass's
  # last row, bit for bit: head sizes 16 / 64 / 256, sliding and gated layers, DeltaNet and MoE.
  add_executable(test_gpu_ttft tests/test_gpu_ttft.c)
  target_link_libraries(test_gpu_ttft PRIVATE spindle_cli)
  foreach(g llama_f32_default:48 gemma3_hd256_w16_softcap:80 gemma3_legacy_linear_w16:72 qwen3_5_interval3_bf16:200
          qwen3_next_moe_f32:130)
    string(REPLACE ":" ";" gp ${g})
    list(GET gp 0 gname)
    list(GET gp 1 glen)
    add_test(NAME gpu_ttft_${gname} COMMAND test_gpu_ttft ${GOLDENS}/${gname} ${GOLDENS}/${gname}/ids.txt ${glen})
    set_tests_properties(gpu_ttft_${gname} PROPERTIES SKIP_RETURN_CODE 77 ENVIRONMENT SPINDLE_ROW_CHUNK=7)
  endforeach()
  # teacher and train with --device cuda against the CPU twin.
  add_test(NAME gpu_cli COMMAND bash ${CMAKE_SOURCE_DIR}/tests/test_gpu_cli.sh $<TARGET_FILE:spindle>
           $<TARGET_FILE:test_shard> ${GOLDENS} ${TEST_TMP}/gpu_cli)
  set_tests_properties(gpu_cli PROPERTIES SKIP_RETURN_CODE 77)
  # Online training on the GPU on SmolLM2: against shard training (fp32 and bf16
  # backbones), resume after a stop and after SIGKILL to the same checkpoint bytes.
  add_test(NAME gpu_train_online COMMAND bash ${CMAKE_SOURCE_DIR}/tests/test_gpu_train_online.sh
           $<TARGET_FILE:spindle> ${GOLDENS} ${CMAKE_SOURCE_DIR}/models/smollm2 ${CMAKE_SOURCE_DIR}/corpus/train
           ${TEST_TMP}/gpu_train_online)
  set_tests_properties(gpu_train_online PROPERTIES SKIP_RETURN_CODE 77)
  # The teacher of a bf16 pass (q, k as the pass rounded them) on a checkpoint with Qwen2-sized key biases.
  add_test(NAME gpu_teacher_bf16 COMMAND bash ${CMAKE_SOURCE_DIR}/tests/test_gpu_teacher_bf16.sh
           $<TARGET_FILE:spindle> ${GOLDENS} ${TEST_TMP}/gpu_teacher_bf16)
  set_tests_properties(gpu_teacher_bf16 PROPERTIES SKIP_RETURN_CODE 77)
  # eval's rows with statistics on the tensor-core kernels against the fp32 support kernel (SPINDLE_STATS_FP32=1).
  add_test(NAME gpu_eval_stats COMMAND bash ${CMAKE_SOURCE_DIR}/tests/test_gpu_eval_stats.sh
           $<TARGET_FILE:spindle> ${GOLDENS} ${TEST_TMP}/gpu_eval_stats)
  set_tests_properties(gpu_eval_stats PROPERTIES SKIP_RETURN_CODE 77)
  # Online training on the synthetic Qwen3-8B (all 36 layers, --random-ids): exact
  # resume after a stop and after SIGKILL at ctx 256 (also --batch 2), then tokens/s
  # and peak memory at ctx 32768.
  add_test(NAME gpu_train_synth COMMAND bash ${CMAKE_SOURCE_DIR}/tests/test_gpu_train_synth.sh
           $<TARGET_FILE:spindle> ${GOLDENS} ${TEST_TMP}/gpu_train_synth)
  set_tests_properties(gpu_train_synth PROPERTIES SKIP_RETURN_CODE 77)
endif()
if(SPINDLE_NCCL)
  # mpirun -np 1 (the NCCL path on one GPU) against the plain run, online and from shards.
  add_test(NAME nccl_train COMMAND bash ${CMAKE_SOURCE_DIR}/tests/test_nccl_train.sh $<TARGET_FILE:spindle>
           ${GOLDENS} ${TEST_TMP}/nccl_train)
  set_tests_properties(nccl_train PROPERTIES SKIP_RETURN_CODE 77)
endif()

# The command-line grammar of every command (cli/args.h): --help, unknown
# flags, --flag=value, malformed values and missing required flags.
add_test(NAME cli_grammar COMMAND bash ${CMAKE_SOURCE_DIR}/tests/test_cli.sh
         $<TARGET_FILE:spindle> ${GOLDENS} ${TEST_TMP}/cli)

# The dependency order of the folders (docs/design.md, "Code layout and
# dependency order"): with each library's own include path, a header of the
# same or a lower folder compiles and a header of a higher folder is refused.
set(layering_cases
  "spindle_base|status.h,fileio.h,progress.h,rng.h|ops.h,indexer.h,model.h"
  "spindle_kernels|ops.h,indexer.h,indexer_ops.h,status.h,rng.h|model.h,forward.h,config.h,family.h,rope.h,export.h,synthetic.h"
  "spindle_model|forward.h,backbone.h,family.h,rope.h,tokenizer.h,synthetic.h,indexer.h,fileio.h|shard.h,corpus.h,npy.h,retrieval.h,export.h,trainer.h"
  "spindle_data|shard.h,corpus.h,ids.h,npy.h,retrieval.h,model.h|export.h,run_state.h,trainer.h,eval.h,cli_util.h"
  "spindle_checkpoints|export.h,run_state.h,shard.h|teacher.h,trainer.h,adamw.h,eval.h,cli_util.h"
  "spindle_teacher|teacher.h,shard.h,corpus.h,backbone.h|export.h,run_state.h,trainer.h,eval.h,cli_util.h,cli_layers.h"
  "spindle_train|trainer.h,train_gpu.h,dist.h,adamw.h,export.h,teacher.h,backbone.h,retrieval.h|eval.h,ruler.h,cli_util.h,commands.h,cli_layers.h"
  "spindle_eval|eval.h,retrieval.h,export.h|teacher.h,trainer.h,train_gpu.h,dist.h,schedule.h,cli_util.h,commands.h"
  "spindle_cli|commands.h,cli_util.h,cli_layers.h,teacher.h,trainer.h,eval.h|")
set(layering_args)
foreach(c ${layering_cases})
  string(REPLACE "|" ";" parts "${c}")
  list(GET parts 0 lib)
  list(GET parts 1 allowed)
  list(GET parts 2 forbidden)
  list(APPEND layering_args "${lib}=$<JOIN:$<TARGET_PROPERTY:${lib},INCLUDE_DIRECTORIES>,:>=${allowed}=${forbidden}")
endforeach()
add_test(NAME layering COMMAND bash ${CMAKE_SOURCE_DIR}/tests/test_layering.sh ${CMAKE_C_COMPILER} ${layering_args})

# The Gated DeltaNet CPU ops: the sequential gated delta rule against a double
# recurrence, the chunked form against it, conv1d, l2norm, gated RMSNorm.
add_executable(test_deltanet tests/test_deltanet.c)
target_link_libraries(test_deltanet PRIVATE spindle_kernels)
add_test(NAME deltanet COMMAND test_deltanet)
# CUDA kernels on host threads (tests/emu: CUDA stand-ins) against their CPU twins, no GPU or nvcc
# needed, so every build checks them (scripts/emulate-cuda.sh KERNEL --quick, test KERNEL_cuda_emulated):
#   deltanet           kernels/cuda/deltanet.cu against the DeltaNet CPU twins;
#   attention_cached   the decoding step's attention (chunks of keys, then a merge), attention_cached_cpu;
#   support_attention  attention over given supports (per query: the warp and the shared-tile kernels;
#                      block-shared), support_attention_cpu;
#   refine             the second stage of two-stage supports (kernels/cuda/indexer_refine.cu: candidate
#                      scores, rows) against dot products in double and the CPU top-k;
#   block_tc           the bf16 tensor-core attention over supports (kernels/cuda/sparse_attention_tc.cu,
#                      block-shared and as block unions; ldmatrix / mma.sync emulated), support_attention_cpu;
#   indexer_block_tc   the block-shared selection's ranking values on tensor cores (kernels/cuda/indexer_block_tc.cu)
#                      against their definition in double;
#   oracle_tc          the oracle's selection from bf16 q, k on tensor cores and the exact row top-k
#                      (kernels/cuda/oracle_tc.cu, topk.cu) against the definition in double;
#   indexer_select_fused  the per-query indexer selection fused with its bf16 tensor-core scores
#                      (kernels/cuda/indexer_select_fused.cu) against the top-k of the scores in double;
#   wgmma              Hopper's warpgroup MMA (kernels/cuda/wgmma.cuh, B through a shared-memory
#                      descriptor) through its check kernel, against A·B in double;
#   indexer            the indexer's CUDA twin (kernels/cuda/indexer.cu: the fused distillation loss and
#                      gradients, the block objectives, recall, selection; cuBLAS as OpenBLAS) against
#                      its CPU twin.
foreach(kernel deltanet attention_cached support_attention refine block_tc indexer_block_tc oracle_tc
        indexer_select_fused wgmma indexer)
  add_test(NAME ${kernel}_cuda_emulated COMMAND bash ${CMAKE_SOURCE_DIR}/scripts/emulate-cuda.sh ${kernel} --quick)
  set_tests_properties(${kernel}_cuda_emulated PROPERTIES SKIP_RETURN_CODE 77
    ENVIRONMENT "EMU_OUT=${TEST_TMP}/emu_${kernel}")
endforeach()

# Hybrid supports (recent window + sinks): the kernel against a naive masked
# softmax, W = S = 0 bit for bit, W >= T dense, the forward on a golden model.
add_executable(test_hybrid_supports tests/test_hybrid_supports.c)
target_link_libraries(test_hybrid_supports PRIVATE spindle_data)
add_test(NAME hybrid_supports COMMAND test_hybrid_supports ${GOLDENS}/llama_f32_default ${GOLDENS}/qwen3_qknorm)

# Greedy decoding with the KV cache (forward_generate) against a full recompute:
# dense-only, sliding-window + soft-capped, RoPE-scaled goldens and SmolLM2-135M;
# a Gated DeltaNet hybrid is refused.
add_executable(test_decode tests/test_decode.c)
target_link_libraries(test_decode PRIVATE spindle_data)
add_test(NAME decode_llama COMMAND test_decode ${GOLDENS}/llama_f32_default ${GOLDENS}/llama_f32_default/ids.txt 24 20)
add_test(NAME decode_gemma3_sliding COMMAND test_decode ${GOLDENS}/gemma3_hd256_w16_softcap
         ${GOLDENS}/gemma3_hd256_w16_softcap/ids.txt 40 30)
add_test(NAME decode_qwen2_yarn COMMAND test_decode ${GOLDENS}/qwen2_bf16_yarn ${GOLDENS}/qwen2_bf16_yarn/ids.txt 50 20)
# Decoding past original_max_position_embeddings (64) under YaRN, Qwen2.5's documented config form.
add_test(NAME decode_qwen2_yarn_qwen_doc COMMAND test_decode ${GOLDENS}/qwen2_yarn_qwen_doc
         ${GOLDENS}/qwen2_yarn_qwen_doc/ids.txt 100 90)
add_test(NAME decode_smollm2 COMMAND test_decode ${CMAKE_SOURCE_DIR}/models/smollm2 ${GOLDENS}/smollm2/ids.txt 160 12)
set_tests_properties(decode_smollm2 PROPERTIES SKIP_RETURN_CODE 77)
add_test(NAME decode_refuses_deltanet COMMAND test_decode --refuses ${GOLDENS}/qwen3_5_types_f32)

# RULER scoring and the tasks-file reader; spindle eval --tasks-file on SmolLM2-135M.
add_executable(test_ruler tests/test_ruler.c)
target_link_libraries(test_ruler PRIVATE spindle_eval)
add_test(NAME ruler COMMAND test_ruler ${TEST_TMP})
add_test(NAME ruler_cli COMMAND bash ${CMAKE_SOURCE_DIR}/tests/test_ruler_cli.sh $<TARGET_FILE:spindle>
         ${CMAKE_SOURCE_DIR}/models/smollm2 ${TEST_TMP}/ruler_cli)
set_tests_properties(ruler_cli PROPERTIES SKIP_RETURN_CODE 77)
# --bos in eval, teacher and train: BOS-led windows equal to those windows written out and read plain;
# refusals.
add_test(NAME bos_windows COMMAND bash ${CMAKE_SOURCE_DIR}/tests/test_bos_windows.sh $<TARGET_FILE:spindle>
         ${CMAKE_SOURCE_DIR}/models/smollm2 ${TEST_TMP}/bos_windows)
set_tests_properties(bos_windows PROPERTIES SKIP_RETURN_CODE 77)
add_test(NAME device_grid COMMAND bash ${CMAKE_SOURCE_DIR}/tests/test_device_grid.sh $<TARGET_FILE:spindle>
         ${CMAKE_SOURCE_DIR}/models/smollm2 ${TEST_TMP}/device_grid)
set_tests_properties(device_grid PROPERTIES SKIP_RETURN_CODE 77)
# scripts/needle-attention.py's look-alike matching (the model run itself needs torch: the GPU machine's).
add_test(NAME needle_attention COMMAND python3 ${CMAKE_SOURCE_DIR}/tests/test_needle_attention.py)
# Per-layer key budgets (eval --k-layers) and their calibration (scripts/calibrate-k-layers.py).
add_test(NAME k_layers COMMAND bash ${CMAKE_SOURCE_DIR}/tests/test_k_layers.sh $<TARGET_FILE:spindle>
         ${GOLDENS} ${TEST_TMP}/k_layers ${CMAKE_SOURCE_DIR})
