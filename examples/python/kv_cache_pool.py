"""A KV-cache pool as an inference engine keeps one: a single tensor registered once, blocks
handed out as (address, length, packed rkey) descriptors, and a peer — another domain, as a
remote engine would be — writing into a block through the unpacked key.  The bytes are then
checked.  CUDA memory when torch sees a GPU, host memory otherwise.

The software NIC cannot reach GPU memory itself (it records the dma-buf hmr exports, as a NIC
with GPUDirect would import it, but moves no device bytes), so on a GPU the pool is registered
through a host shadow: the NIC reaches host memory that stands in for the block, and the
owner's MemoryRegion.sync() moves the bytes to the GPU once a block was written.  Code written
this way runs unchanged on a NIC that does reach the GPU: sync() then has nothing to copy.

    PYTHONPATH=build-py/python /usr/bin/python3 examples/python/kv_cache_pool.py [--cpu]

(/usr/bin/python3: Debian's interpreter, which has torch.)  The NIC is hmr's software NIC
("sim"); with a real one only Domain("verbs" or "ofi", ...) changes, and the peer is a
process on another machine that receives the descriptor bytes."""
import argparse
from typing import NamedTuple

import torch

import hmr


class BlockDescriptor(NamedTuple):
    """What the pool owner sends a peer for one block: plain bytes and integers."""

    address: int  # where the block starts, as the peer addresses it (remote_address based)
    length: int
    rkey: bytes  # MemoryRegion.pack_rkey() of the pool


class KVCachePool:
    """num_blocks blocks of block_bytes each, in one tensor registered once: handing out a
    block costs no registration."""

    def __init__(self, domain, num_blocks, block_bytes, device):
        self.block_bytes = block_bytes
        self.tensor = torch.zeros(num_blocks * block_bytes, dtype=torch.uint8, device=device)
        self.region = domain.register(self.tensor, hmr.REMOTE_READ | hmr.REMOTE_WRITE)
        self.rkey = self.region.pack_rkey()
        self.free = list(range(num_blocks))

    def allocate(self):
        block = self.free.pop()
        # A peer addresses what the NIC registered: the shadow, where there is one.
        return block, BlockDescriptor(self.region.remote_address + block * self.block_bytes,
                                      self.block_bytes, self.rkey)

    def written(self, index):
        """Called when a peer's write into a block is known complete: copies the block from
        a host shadow to the GPU (nothing to do when the NIC reaches the memory itself)."""
        self.region.sync(hmr.SYNC_TO_DEVICE, index * self.block_bytes, self.block_bytes)

    def block(self, index):
        start = index * self.block_bytes
        return self.tensor[start:start + self.block_bytes]

    def close(self):
        self.region.close()


def peer_writes(peer_domain, target_endpoint, descriptor, payload):
    """The remote side: only the descriptor's bytes cross over."""
    with peer_domain.unpack_rkey(descriptor.rkey) as rkey, peer_domain.endpoint() as ep:
        ep.connect(target_endpoint)
        offset = descriptor.address - rkey.address  # inside the pool's region
        assert 0 <= offset and offset + len(payload) <= rkey.length
        ep.write(payload, rkey.address + offset, rkey.key)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", action="store_true", help="host memory even with a GPU")
    parser.add_argument("--blocks", type=int, default=64)
    parser.add_argument("--block-bytes", type=int, default=64 * 1024)
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() and not args.cpu else "cpu"
    print(f"pool on {device}: {args.blocks} blocks of {args.block_bytes} bytes")

    # On a GPU: a software NIC without GPUDirect, as many machines have (dmabuf=0), and a
    # domain that may register GPU memory through a host shadow.  With a real NIC only the
    # Domain arguments change ("verbs" or "ofi", ...).
    owner_options = {"nic_options": "dmabuf=0", "allow_hmem_copy": True} if device == "cuda" else {}
    with hmr.Domain("sim", **owner_options) as owner, hmr.Domain("sim") as peer:
        pool = KVCachePool(owner, args.blocks, args.block_bytes, device)
        print(f"registered once: iface={pool.region.iface} path={pool.region.path} "
              f"key={pool.region.key:#x}, packed rkey {len(pool.rkey)} bytes")
        target = owner.endpoint()
        index, descriptor = pool.allocate()
        payload = bytes((index * 7 + i) % 251 for i in range(descriptor.length))
        peer_writes(peer, target, descriptor, payload)
        pool.written(index)
        written = pool.block(index).cpu().numpy().tobytes()
        if written != payload:
            raise SystemExit("FAILED: the block does not hold what the peer wrote")
        print(f"peer wrote block {index} ({descriptor.length} bytes) through the unpacked key: "
              "verified")
        print(f"owner stats: registrations={owner.stats()['registrations']}, "
              f"peer rma_ops={peer.stats()['rma_ops']}")
        pool.close()


if __name__ == "__main__":
    main()
