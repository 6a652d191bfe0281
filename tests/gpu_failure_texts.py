"""What GPUs, NCCL and launchers really print when they fail, copied from public reports, for
the classifiers' tests (no GPU here to make them)."""

# torch >= 2.8 (c10::AcceleratorError), a CUDA runtime allocation outside torch's allocator;
# as reported e.g. in vLLM's and many training logs.
CUDA_ERROR_OUT_OF_MEMORY = (
    "CUDA error: out of memory\n"
    "Search for `cudaErrorMemoryAllocation' in "
    "https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html for more information.\n"
    "CUDA kernel errors might be asynchronously reported at some other API call, so the "
    "stacktrace below might be incorrect.\n"
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
)

# torch's cuBLAS handle pool (QwenLM/Qwen3#873, DeepMotionAIResearch/DenseMatchingBenchmark#20)
CUBLAS_ALLOC_FAILED = "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"

# torch's C10D_NCCL_CHECK with NCCL >= 2.13 (ncclGetLastError appended); the OOM form, as the
# NCCL OOM reports show it (pytorch/pytorch#152302: "Cuda failure 2 'out of memory'")
NCCL_UNHANDLED_CUDA_ERROR_OOM = (
    "NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:77, unhandled cuda error "
    "(run with NCCL_DEBUG=INFO for details), NCCL version 2.26.2\n"
    "ncclUnhandledCudaError: Call to CUDA function failed.\n"
    "Last error:\n"
    "Cuda failure 2 'out of memory'"
)

# the same exception for another CUDA failure (a real report: NCCL NVLS on some drivers)
NCCL_UNHANDLED_CUDA_ERROR_OTHER = NCCL_UNHANDLED_CUDA_ERROR_OOM.replace(
    "Cuda failure 2 'out of memory'", "Cuda failure 1 'invalid argument'"
)

# older NCCL / torch: no "Last error" in the exception, the cause only in NCCL_DEBUG's log
NCCL_UNHANDLED_CUDA_ERROR_BARE = (
    "NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1331, unhandled cuda "
    "error (run with NCCL_DEBUG=INFO for details), NCCL version 2.18.1\n"
    "ncclUnhandledCudaError: Call to CUDA function failed."
)

# NCCL_DEBUG=WARN's line for it (PKU-YuanGroup/Open-Sora-Plan#386, older NCCL, no error number)
NCCL_WARN_OOM_LINE = "ins-7df6eojsifuykig9:3018451:3018451 [0] enqueue.cc:1085 NCCL WARN Cuda failure 'out of memory'"

# accelerate 1.15's launch on a busy main_process_port with several machines (made here: a
# socket held on the port, `accelerate launch` of a 2-machine config)
ACCELERATE_PORT_IN_USE = """Traceback (most recent call last):
  File "<frozen runpy>", line 198, in _run_module_as_main
  File "/venv/lib/python3.11/site-packages/accelerate/commands/launch.py", line 1007, in multi_gpu_launcher
    current_env = prepare_multi_gpu_env(args)
                  ^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/venv/lib/python3.11/site-packages/accelerate/utils/launch.py", line 244, in prepare_multi_gpu_env
    raise ConnectionError(
ConnectionError: Tried to launch distributed communication on port `29633`, but another process is utilizing it. Please specify a different port (such as using the `--main_process_port` flag or specifying a different `main_process_port` in your config file) and rerun your script. To automatically use the next open port (on a single node), you can set this to `0`."""

# torch's TCPStore in the elastic agent's static rendezvous, when the port was taken after
# accelerate's check (vllm-project/vllm#39015)
TCPSTORE_EADDRINUSE = """  File "/venv/lib/python3.11/site-packages/torch/distributed/elastic/rendezvous/static_tcp_rendezvous.py", line 67, in next_rendezvous
    self._store = TCPStore(  # type: ignore[call-arg]
                  ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use"""

# python -m in an environment without the launcher (made here, Python 3.11)
LAUNCHER_NOT_INSTALLED = (
    "/root/.pyenv/versions/3.11.7/bin/python3: Error while finding module specification for "
    "'accelerate.commands.launch' (ModuleNotFoundError: No module named 'accelerate')"
)

# torch's elastic agent after the kernel's OOM killer took a rank (the ranks had started)
RANK_SIGKILLED = """torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
ado_actuators.sfttrainer.trainer FAILED
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 41877)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 41877
============================================================"""
