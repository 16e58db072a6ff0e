# hitch-bench-cuda-optim: the optimizers' GPU step on ResNet-50's tensors against a device-to-device copy
# (bench/cuda_optim.cu), and bench/cuda_optim_torch.py for PyTorch's fused Adam on the same tensors. Built only with
# the CUDA toolkit; the host side of the check against the CPU kernels must not contract a * b + c.
if(TARGET hitch::cuda)
  add_executable(hitch-bench-cuda-optim "${CMAKE_CURRENT_LIST_DIR}/cuda_optim.cu")
  target_link_libraries(hitch-bench-cuda-optim PRIVATE hitch::cuda)
  target_compile_options(hitch-bench-cuda-optim PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-ffp-contract=off>)
endif()
