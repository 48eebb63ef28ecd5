"""The part of hmr's C ABI (include/hmr/hmr.h) that the GPU lane's Python scripts call, through
ctypes over libhmr.so, as a Python transport would.  The structs mirror hmr.h field by field;
`python3 hmr_ctypes.py --layout` prints their sizes and offsets in the format of
tests/gpu/abi_layout.c, and the ctest hmr_ctypes_layout compares the two, so a change of hmr.h
that these mirrors miss fails on every machine, not first on the GPU one."""
import ctypes
import os
import sys

HMR_HMEM_SYSTEM, HMR_HMEM_CUDA = 0, 1
HMR_MEM_KIND_NAMES = {0: "host", 1: "host_alloc", 2: "device_only", 3: "managed"}
HMR_MR_PATH_NAMES = {0: "address", 1: "dmabuf", 2: "peer_direct", 3: "host_shadow",
                     4: "caller_dmabuf"}

HMR_MR_LOCAL = 1 << 2
HMR_MR_VIRT_ADDR = 1 << 4
HMR_MR_PROV_KEY = 1 << 6
HMR_MR_HMEM = 1 << 10
HMR_READ, HMR_WRITE = 1 << 8, 1 << 9
HMR_REMOTE_READ, HMR_REMOTE_WRITE = 1 << 12, 1 << 13
HMR_MEM_ATTR_SYS_DEV = 1 << 0


class DomainAttr(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("nic", ctypes.c_char_p),
                ("nic_options", ctypes.c_char_p), ("mr_mode", ctypes.c_uint64),
                ("mr_key_size", ctypes.c_size_t), ("mr_iov_limit", ctypes.c_size_t),
                ("mr_cnt", ctypes.c_size_t), ("threading", ctypes.c_int),
                ("cache_max_count", ctypes.c_size_t), ("cache_max_size", ctypes.c_size_t),
                ("cache_monitor", ctypes.c_char_p), ("nic_handle", ctypes.c_void_p),
                ("flags", ctypes.c_uint64)]


_STAT_NAMES = ["mr_open", "mr_bytes", "registrations", "registration_errors",
               "nic_registrations", "nic_deregistrations", "registration_ns", "rma_ops",
               "rma_bytes", "rma_errors", "cache_hits", "cache_misses", "cache_invalidations",
               "cache_evictions", "cache_uncached", "cache_regions", "cache_bytes",
               "cache_in_use", "deregistration_ns", "cache_pressure_evictions",
               "nic_refusal_retries", "nic_refusals", "nic_registrations_held",
               "nic_pinned_bytes"]


class DomainStats(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t)] + [(n, ctypes.c_uint64) for n in _STAT_NAMES]

    def as_dict(self):
        return {n: getattr(self, n) for n in _STAT_NAMES}


class MemAttr(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("field_mask", ctypes.c_uint64),
                ("iface", ctypes.c_int), ("kind", ctypes.c_int), ("device", ctypes.c_uint64),
                ("base", ctypes.c_void_p), ("alloc_len", ctypes.c_size_t),
                ("alloc_id", ctypes.c_uint64), ("sys_dev", ctypes.c_char * 32),
                ("numa_node", ctypes.c_int), ("dmabuf_fd", ctypes.c_int),
                ("dmabuf_offset", ctypes.c_uint64)]


class MrInfo(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("iface", ctypes.c_int), ("kind", ctypes.c_int),
                ("device", ctypes.c_uint64), ("path", ctypes.c_int), ("cached", ctypes.c_int),
                ("dmabuf_fd", ctypes.c_int), ("dmabuf_offset", ctypes.c_uint64),
                ("shadow", ctypes.c_void_p)]


LAYOUTS = {"hmr_domain_attr": DomainAttr, "hmr_domain_stats": DomainStats,
           "hmr_mem_attr": MemAttr, "hmr_mr_info": MrInfo}


class HmrError(RuntimeError):
    pass


class Hmr:
    """libhmr.so with the signatures of the calls used here; each call raises HmrError with
    hmr_last_error() when it fails."""

    def __init__(self, path=None):
        path = path or os.environ.get("HMR_LIBRARY", "libhmr.so.0")
        self.lib = ctypes.CDLL(path)
        lib = self.lib
        vp, u64, sz = ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t
        lib.hmr_last_error.restype = ctypes.c_char_p
        lib.hmr_domain_open.argtypes = [ctypes.POINTER(DomainAttr), ctypes.POINTER(vp)]
        lib.hmr_domain_close.argtypes = [vp]
        lib.hmr_domain_query_stats.argtypes = [vp, ctypes.POINTER(DomainStats)]
        lib.hmr_mr_reg.argtypes = [vp, vp, sz, u64, u64, u64, u64, ctypes.POINTER(vp), vp]
        lib.hmr_mr_close.argtypes = [vp]
        lib.hmr_mr_query.argtypes = [vp, ctypes.POINTER(MrInfo)]
        lib.hmr_mr_key.argtypes = [vp]
        lib.hmr_mr_key.restype = u64
        lib.hmr_mem_query.argtypes = [vp, sz, ctypes.POINTER(MemAttr)]

    def _check(self, rc, what):
        if rc != 0:
            raise HmrError(f"{what}: {rc} ({self.lib.hmr_last_error().decode()})")

    # Without HMR_MR_HMEM in mr_mode hmr_mr_reg detects what the memory is; with it, as with
    # libfabric's FI_MR_HMEM, hmr_mr_reg declares system memory and a GPU pointer is refused.
    def domain_open(self, nic=b"sim", mr_mode=HMR_MR_PROV_KEY | HMR_MR_VIRT_ADDR | HMR_MR_LOCAL,
                    cache_monitor=None):
        attr = DomainAttr(size=ctypes.sizeof(DomainAttr), nic=nic, mr_mode=mr_mode,
                          cache_monitor=cache_monitor)
        domain = ctypes.c_void_p()
        self._check(self.lib.hmr_domain_open(ctypes.byref(attr), ctypes.byref(domain)),
                    "hmr_domain_open")
        return domain

    def domain_close(self, domain):
        self._check(self.lib.hmr_domain_close(domain), "hmr_domain_close")

    def stats(self, domain):
        stats = DomainStats(size=ctypes.sizeof(DomainStats))
        self._check(self.lib.hmr_domain_query_stats(domain, ctypes.byref(stats)),
                    "hmr_domain_query_stats")
        return stats.as_dict()

    def mr_reg(self, domain, address, length,
               access=HMR_READ | HMR_WRITE | HMR_REMOTE_READ | HMR_REMOTE_WRITE):
        mr = ctypes.c_void_p()
        self._check(self.lib.hmr_mr_reg(domain, address, length, access, 0, 0, 0,
                                        ctypes.byref(mr), None), "hmr_mr_reg")
        return mr

    def mr_reg_status(self, domain, address, length):
        """hmr_mr_reg's return code and reason, for calls expected to fail."""
        mr = ctypes.c_void_p()
        rc = self.lib.hmr_mr_reg(domain, address, length, HMR_READ | HMR_REMOTE_WRITE, 0, 0, 0,
                                 ctypes.byref(mr), None)
        if rc == 0:
            self.mr_close(mr)
            return 0, ""
        return rc, self.lib.hmr_last_error().decode()

    def mr_close(self, mr):
        self._check(self.lib.hmr_mr_close(mr), "hmr_mr_close")

    def mr_query(self, mr):
        info = MrInfo(size=ctypes.sizeof(MrInfo))
        self._check(self.lib.hmr_mr_query(mr, ctypes.byref(info)), "hmr_mr_query")
        return info

    def mem_query(self, address, length, field_mask=HMR_MEM_ATTR_SYS_DEV):
        attr = MemAttr(size=ctypes.sizeof(MemAttr), field_mask=field_mask)
        self._check(self.lib.hmr_mem_query(address, length, ctypes.byref(attr)),
                    "hmr_mem_query")
        return attr


def print_layout(out=sys.stdout):
    for name, struct in sorted(LAYOUTS.items()):
        out.write(f"{name} size {ctypes.sizeof(struct)}\n")
        for field, _ in struct._fields_:
            out.write(f"{name}.{field} {getattr(struct, field).offset}\n")


if __name__ == "__main__":
    if sys.argv[1:] == ["--layout"]:
        print_layout()
    else:
        sys.exit("usage: hmr_ctypes.py --layout")
