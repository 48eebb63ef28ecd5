"""The package as built, in an interpreter other than the one it was built with.

hmr's extension is built once against CPython's limited API of 3.11 (hmr/_hmr.abi3.so), and
docs/python.md promises that the one file serves 3.11 and every later CPython — the GPU
machine's Python 3.12 loads what Debian's 3.11 built here.  abi3_interpreters.sh runs this
script in each other CPython >= 3.11 it finds; it uses the standard library only (those
interpreters may have no numpy, torch or pytest) and goes through the API's main names:
buffer-protocol objects of several kinds, hmr.Pointer, query, packed keys and RMA between two
domains, errors with their codes and reasons, the region keeping its object alive.

Prints one line, "abi3 smoke: ok (<version>, <extension path>)", or fails with the reason."""
import array
import gc
import mmap
import sys
import weakref

import hmr


def check(condition, what):
    if not condition:
        raise SystemExit(f"abi3 smoke: FAILED: {what}")


def registers_buffers(domain):
    memory = bytearray(64 * 1024)
    for obj, length in ((memory, len(memory)),
                        (memoryview(memory)[4096:8192], 4096),
                        (array.array("d", range(512)), 512 * 8),
                        (mmap.mmap(-1, 1 << 16), 1 << 16)):
        with domain.register(obj) as region:
            check(region.length == length, f"{type(obj).__name__}: length {region.length}")
            check(region.iface == "system", f"{type(obj).__name__}: iface {region.iface}")
            check(isinstance(region.key, int), "key is an int")
        region.close()  # a second close is harmless
    with domain.register(hmr.Pointer(hmr.query(memory).base, 4096, keepalive=memory)) as region:
        check(region.length == 4096, "hmr.Pointer registers its length")


def refuses_what_it_must(domain):
    try:
        domain.register(bytes(4096), hmr.REMOTE_WRITE)
    except hmr.AccessError as error:
        check(error.code > 0 and "read-only" in error.reason, f"read-only refusal: {error!r}")
    else:
        raise SystemExit("abi3 smoke: FAILED: a read-only buffer was registered for REMOTE_WRITE")
    try:
        domain.register(object())
    except hmr.Error as error:
        check(bool(error.reason), "a refusal has a reason")
    else:
        raise SystemExit("abi3 smoke: FAILED: an object without memory was registered")


def keeps_its_object_alive(domain):
    class Buffer(bytearray):
        pass

    obj = Buffer(8192)
    watch = weakref.ref(obj)
    region = domain.register(obj)
    del obj
    gc.collect()
    check(watch() is not None, "the region let its object be collected")
    region.close()
    gc.collect()
    check(watch() is None, "the closed region still holds its object")


def moves_bytes_through_a_packed_key():
    with hmr.Domain() as target, hmr.Domain() as peer:
        memory = bytearray(1 << 16)
        with target.register(memory) as region, target.endpoint() as target_ep, \
                peer.endpoint() as peer_ep:
            peer_ep.connect(target_ep)
            with peer.unpack_rkey(region.pack_rkey()) as rkey:
                message = b"written from a peer domain, abi3"
                peer_ep.write(message, rkey.address + 100, rkey.key)
                check(bytes(memory[100:100 + len(message)]) == message, "RMA write landed")
                back = bytearray(len(message))
                peer_ep.read(back, rkey.address + 100, rkey.key)
                check(bytes(back) == message, "RMA read came back")
        registered = target.stats()
        check(registered["registrations"] == 1 and registered["mr_open"] == 0,
              f"the target's stats: {registered}")
        moved = peer.stats()  # (RMA is counted where it is issued)
        check(moved["rma_ops"] == 2 and moved["rma_bytes"] == 2 * len(message),
              f"the peer's stats: {moved}")


def main():
    check(sys.version_info >= (3, 11), f"CPython {sys.version}: below 3.11")
    check(hmr._hmr.__file__.endswith(".abi3.so"), f"extension {hmr._hmr.__file__}")
    check(isinstance(hmr.__version__, str) and hmr.__version__, "hmr.__version__")
    with hmr.Domain("sim") as domain:
        check(domain.md_query()["rkey_packed_size"] > 0, "md_query")
        registers_buffers(domain)
        refuses_what_it_must(domain)
        keeps_its_object_alive(domain)
    moves_bytes_through_a_packed_key()
    version = ".".join(str(part) for part in sys.version_info[:3])
    print(f"abi3 smoke: ok (CPython {version}, {hmr._hmr.__file__})")


if __name__ == "__main__":
    main()
