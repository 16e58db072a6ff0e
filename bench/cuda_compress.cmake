# hitch-bench-cuda-compress: the dense GPU codecs' encode and decode against a device-to-device copy
# (bench/cuda_compress.cu). Built only with the CUDA toolkit; the check against the CPU codecs needs their host code
# uncontracted.
if(TARGET hitch::cuda)
  add_executable(hitch-bench-cuda-compress "${CMAKE_CURRENT_LIST_DIR}/cuda_compress.cu")
  target_link_libraries(hitch-bench-cuda-compress PRIVATE hitch::cuda)
  target_compile_options(hitch-bench-cuda-compress PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-ffp-contract=off>)
endif()
