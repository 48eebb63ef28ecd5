"""NCCL loading libnccl-net-hmr.so through PyTorch's distributed package, one rank, on a GPU
machine.  Run with the plugin's folder on LD_LIBRARY_PATH, NCCL_NET_PLUGIN=hmr and
NCCL_DEBUG=INFO; NCCL's own INFO lines (on stdout) show which plugin it loaded and the devices
and ptrSupport the plugin reported.  The all-reduce forces the communicator to initialise; with
one rank NCCL moves no data over the network."""
import os
import sys

import torch
import torch.distributed as dist


def main():
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29511")
    print(f"torch {torch.__version__}, NCCL {torch.cuda.nccl.version()}", flush=True)
    device = torch.device("cuda:0")
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=device)
    tensor = torch.ones(1 << 20, device=device)
    dist.all_reduce(tensor)
    torch.cuda.synchronize()
    ok = bool(torch.all(tensor == 1).item())
    dist.destroy_process_group()
    print("all_reduce on one rank: " + ("correct" if ok else "WRONG"), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
