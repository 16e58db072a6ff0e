# hitch-bench-cuda-topk: top-k selection on the GPU against a full CUB radix sort, and every sparse codec's encode
# against a device-to-device copy (bench/cuda_topk.cu); bench/cuda_topk_torch.py measures torch.topk on the same size.
# Built only with the CUDA toolkit; the check against the CPU codecs needs their host code uncontracted.
if(TARGET hitch::cuda)
  add_executable(hitch-bench-cuda-topk "${CMAKE_CURRENT_LIST_DIR}/cuda_topk.cu")
  target_link_libraries(hitch-bench-cuda-topk PRIVATE hitch::cuda CUDA::cublas)
  target_compile_options(hitch-bench-cuda-topk PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-ffp-contract=off>)
endif()
