"""Run by test_device_memory.py in a process of its own, with HMR_CUDA_LIBRARY naming the
project's fake CUDA driver (tests/fakes/fake_cuda*.c, a real libcuda.so.1 built here): CUDA
memory through the package where there is no GPU.  It allocates device memory through the
driver's own API (ctypes, the same library object hmr dlopens), registers it as an
hmr.Pointer, and checks each path a NIC without GPUDirect leaves: the host shadow (a peer
reads and writes the shadow, MemoryRegion.sync moves the bytes), the refusal without
allow_hmem_copy, and the dma-buf path the software NIC records but cannot move bytes through.
Prints "ok" last; any failed check raises (exit status 1)."""
import ctypes
import os
import threading

import hmr

SIZE = 1 << 20


def driver():
    cuda = ctypes.CDLL(os.environ["HMR_CUDA_LIBRARY"])

    def check(result, what):
        if result != 0:
            raise RuntimeError(f"{what} returned CUresult {result}")

    check(cuda.cuInit(0), "cuInit")
    context = ctypes.c_void_p()
    check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), 0), "cuDevicePrimaryCtxRetain")
    check(cuda.cuCtxSetCurrent(context), "cuCtxSetCurrent")
    return cuda, check


def main():
    cuda, check = driver()
    address = ctypes.c_uint64()
    check(cuda.cuMemAlloc_v2(ctypes.byref(address), ctypes.c_size_t(SIZE)), "cuMemAlloc_v2")
    device = address.value

    def to_device(offset, data):
        check(cuda.cuMemcpyHtoD_v2(ctypes.c_uint64(device + offset), data,
                                   ctypes.c_size_t(len(data))), "cuMemcpyHtoD_v2")

    def from_device(offset, length):
        out = ctypes.create_string_buffer(length)
        check(cuda.cuMemcpyDtoH_v2(out, ctypes.c_uint64(device + offset),
                                   ctypes.c_size_t(length)), "cuMemcpyDtoH_v2")
        return out.raw

    initial = bytes(i % 251 for i in range(SIZE))
    to_device(0, initial)
    memory = hmr.Pointer(device, SIZE)
    info = hmr.query(memory)
    assert (info.iface, info.kind, info.base, info.alloc_len) == ("cuda", "device_only", device,
                                                                   SIZE), info

    # A NIC that imports no dma-buf (and has no peer-direct): a host shadow stands in.
    with hmr.Domain("sim", nic_options="dmabuf=0", allow_hmem_copy=True) as owner, \
            hmr.Domain("sim") as peer:
        region = owner.register(memory)
        assert (region.iface, region.kind, region.path) == ("cuda", "device_only",
                                                            "host_shadow"), region.path
        assert region.address == device and region.length == SIZE
        assert region.shadow is not None and region.shadow != device
        assert region.remote_address == region.shadow  # what a peer targets
        target = owner.endpoint()
        with peer.unpack_rkey(region.pack_rkey()) as rkey, peer.endpoint() as ep:
            assert rkey.address == region.shadow and rkey.length == SIZE
            assert rkey.iface == "cuda"
            ep.connect(target)
            # The shadow starts as the device's bytes.
            seen = bytearray(4096)
            ep.read(seen, rkey.address + 8192, rkey.key)
            assert bytes(seen) == initial[8192:8192 + 4096]
            # A peer's write lands in the shadow; the device has it after sync, not before.
            message = bytes((7 * i + 3) % 256 for i in range(3000))
            ep.write(message, rkey.address + 100, rkey.key)
            assert from_device(100, len(message)) == initial[100:100 + len(message)]
            region.sync(hmr.SYNC_TO_DEVICE, 100, len(message))
            assert from_device(100, len(message)) == message
            assert from_device(0, 100) == initial[:100]
            # The device changes; after sync from the device the peer reads the new bytes.
            changed = b"written on the device" * 10
            to_device(500000, changed)
            region.sync(hmr.SYNC_FROM_DEVICE, offset=500000, length=len(changed))
            back = bytearray(len(changed))
            ep.read(back, rkey.address + 500000, rkey.key)
            assert bytes(back) == changed
            # The whole region, both ways (length None: to the end).
            region.sync(hmr.SYNC_TO_DEVICE)
            region.sync(hmr.SYNC_FROM_DEVICE)
            # Bad arguments: each an hmr.Error with the reason, nothing copied.
            for args, kwargs in (((0,), {}), ((hmr.SYNC_TO_DEVICE | hmr.SYNC_FROM_DEVICE,), {}),
                                 ((hmr.SYNC_TO_DEVICE, SIZE + 1), {}),
                                 ((hmr.SYNC_TO_DEVICE, SIZE - 10), {"length": 11})):
                try:
                    region.sync(*args, **kwargs)
                except hmr.InvalidArgumentError as error:
                    assert error.reason, error
                else:
                    raise AssertionError(f"sync{args} {kwargs} was accepted")
        target.close()
        # close() while another thread is inside sync() (which runs without the GIL) waits
        # for it: BusyError, never a freed MR under a copy (ASan's lane would see one).
        busy = 0
        stop = threading.Event()

        def syncing():
            while not stop.is_set():
                try:
                    region.sync(hmr.SYNC_TO_DEVICE)
                except hmr.ClosedError:
                    return

        worker = threading.Thread(target=syncing)
        worker.start()
        closed = False
        for _ in range(200):  # (the worker holds the GIL only between its syncs)
            try:
                region.close()
                closed = True
                break
            except hmr.BusyError:
                busy += 1
        stop.set()
        worker.join()
        if not closed:
            region.close()
        print(f"close() refused {busy} time(s) while sync() ran")
        try:
            region.sync(hmr.SYNC_TO_DEVICE)
        except hmr.ClosedError:
            pass
        else:
            raise AssertionError("sync of a closed region was accepted")

    # Without allow_hmem_copy the same registration fails and names each path it tried.
    with hmr.Domain("sim", nic_options="dmabuf=0") as strict:
        try:
            strict.register(memory)
        except hmr.Error as error:
            assert "host shadow" in error.reason and "dma-buf" in error.reason, error.reason
        else:
            raise AssertionError("device memory registered with no path to the NIC")

    # The default software NIC imports the dma-buf hmr exports; it cannot move device bytes
    # (a real NIC would), so a peer's RMA fails with why, and sync has nothing to copy.
    with hmr.Domain("sim") as owner, hmr.Domain("sim") as peer:
        with owner.register(memory) as region:
            assert region.path == "dmabuf" and region.shadow is None
            assert region.remote_address == device
            region.sync(hmr.SYNC_TO_DEVICE)
            target = owner.endpoint()
            with peer.unpack_rkey(region.pack_rkey()) as rkey, peer.endpoint() as ep:
                ep.connect(target)
                try:
                    ep.write(b"x" * 16, rkey.address, rkey.key)
                except hmr.NotSupportedError as error:
                    assert "dma-buf" in error.reason, error.reason
                else:
                    raise AssertionError("the software NIC claimed to write device memory")
            target.close()

    check(cuda.cuMemFree_v2(ctypes.c_uint64(device)), "cuMemFree_v2")
    print("ok")


if __name__ == "__main__":
    main()
