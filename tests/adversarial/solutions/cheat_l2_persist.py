"""Cheat (GPU): asks for the largest persisting-L2 set-aside and marks the weight B as persisting on the
current stream, so B would survive the grader's L2 flush between calls and a memory-bound decode GEMM
would read it from L2. The grader resets the set-aside and demotes persisting lines before every timed
call: the time is no better than the honest kernel's (checks.l2_persisting_resets counts the resets)."""
import ctypes

import torch

DESTINATION_PASSING = True
_cuda = ctypes.CDLL("libcuda.so.1")
CU_LIMIT_PERSISTING_L2_CACHE_SIZE = 0x06
CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE = 108
CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW = 1
CU_ACCESS_PROPERTY_STREAMING = 1
CU_ACCESS_PROPERTY_PERSISTING = 2


class _Window(ctypes.Structure):
    _fields_ = [("base_ptr", ctypes.c_void_p), ("num_bytes", ctypes.c_size_t), ("hitRatio", ctypes.c_float),
                ("hitProp", ctypes.c_int), ("missProp", ctypes.c_int)]


class _AttrValue(ctypes.Union):
    _fields_ = [("accessPolicyWindow", _Window), ("pad", ctypes.c_char * 64)]


def _check(rc, what):
    if rc != 0:
        raise RuntimeError(f"{what} failed with CUresult {rc}")


_max = ctypes.c_int(0)
_check(_cuda.cuDeviceGetAttribute(ctypes.byref(_max), CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE,
                                  torch.cuda.current_device()), "cuDeviceGetAttribute")


_stream = None


def run(A, B, C):
    global _stream
    if _stream is None:
        _stream = torch.cuda.Stream()  # attributes cannot be set on the legacy default stream
    _check(_cuda.cuCtxSetLimit(CU_LIMIT_PERSISTING_L2_CACHE_SIZE, ctypes.c_size_t(_max.value)), "cuCtxSetLimit")
    v = _AttrValue()
    v.accessPolicyWindow.base_ptr = B.data_ptr()
    v.accessPolicyWindow.num_bytes = min(B.numel() * B.element_size(), _max.value)
    v.accessPolicyWindow.hitRatio = min(1.0, _max.value / max(v.accessPolicyWindow.num_bytes, 1))
    v.accessPolicyWindow.hitProp = CU_ACCESS_PROPERTY_PERSISTING
    v.accessPolicyWindow.missProp = CU_ACCESS_PROPERTY_STREAMING
    _check(_cuda.cuStreamSetAttribute(ctypes.c_void_p(_stream.cuda_stream), CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW,
                                      ctypes.byref(v)), "cuStreamSetAttribute")
    current = torch.cuda.current_stream()
    _stream.wait_stream(current)
    with torch.cuda.stream(_stream):
        torch.matmul(A, B.T, out=C)
    current.wait_stream(_stream)  # joined: the events see the work (this cheat is about L2, not streams)
