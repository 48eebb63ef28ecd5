#!/usr/bin/env python3
"""A scripted hmr-perftest peer that misbehaves on purpose, for perftest_peer_failures.sh and
perftest_admission.sh.

It speaks the out-of-band protocol of tools/hmr-perftest/peer_message.h (version 3) and then
does what a broken or stalled peer does, so the test can check that the real hmr-perftest on
the other side ends with a reason instead of waiting for ever:

  silent-client PORT TEST PROVIDER
      connects to a server, sends a valid Hello and Buffer (the server's own, echoed), then
      says nothing and moves no bytes; prints what the server says before it hangs up
  asking-client PORT PROVIDER MAX_SIZE
      connects to a server and sends a Hello for write_bw with messages up to MAX_SIZE bytes
      (any u64: past the protocol's 4 GiB too); prints what the server answers (its reason,
      or "peer sent message type 2" when it serves the request) until it hangs up
  unreachable-server PORT PROVIDER
      serves one client a Buffer whose fabric address nobody answers at (tcp: TEST-NET-1,
      192.0.2.1, RFC 5737; shm: a process that does not exist); prints what the client says
      before it hangs up

Each waits only for the other side to end the conversation; the socket timeout is a safety
net for a broken test, not what is tested.
"""
import socket
import struct
import sys
import time

VERSION = 3
HELLO, BUFFER, DONE, ERROR = 1, 2, 3, 4
TESTS = {"write_bw": 1, "read_bw": 2, "write_lat": 3}
SAFETY_NET_S = 120


def message(kind, body):
    return b"HMRP" + struct.pack("<HHI", VERSION, kind, len(body)) + body


def string(data):
    data = data.encode() if isinstance(data, str) else data
    return struct.pack("<I", len(data)) + data


def hello(test, provider, max_size=64):
    return message(HELLO, struct.pack("<HHQQQ", TESTS[test], 0, min(8, max_size), max_size, 10) +
                   string(provider) + string("host"))


def buffer(address, length, mr_mode, raw, key, fabric_address):
    return message(BUFFER, struct.pack("<QQQB", address, length, mr_mode, raw) +
                   string(key) + string(fabric_address))


def read_exactly(conn, size):
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def receive(conn):
    """(type, body), or None once the peer hung up."""
    header = read_exactly(conn, 12)
    if header is None:
        return None
    version, kind, length = struct.unpack("<HHI", header[4:])
    if header[:4] != b"HMRP" or version != VERSION:
        sys.exit(f"perftest_peer: not an hmr-perftest v{VERSION} message: {header!r}")
    body = read_exactly(conn, length)
    return None if body is None else (kind, body)


def parse_buffer(body):
    address, length, mr_mode, raw = struct.unpack("<QQQB", body[:25])
    at = 25
    (key_size,) = struct.unpack("<I", body[at:at + 4])
    key = body[at + 4:at + 4 + key_size]
    at += 4 + key_size
    (fabric_size,) = struct.unpack("<I", body[at:at + 4])
    return address, length, mr_mode, raw, key, body[at + 4:at + 4 + fabric_size]


def report_until_hangup(conn):
    """Prints each message the peer sends (an error's reason in words) until it hangs up."""
    try:
        while (got := receive(conn)) is not None:
            kind, body = got
            if kind == ERROR:
                print("peer said: " + body[4:].decode(errors="replace"), flush=True)
            else:
                print(f"peer sent message type {kind}", flush=True)
    except ConnectionResetError:
        pass
    print("peer hung up", flush=True)


def connect(port):
    """As hmr-perftest's client does: the server may be listening a moment later."""
    give_up = time.monotonic() + SAFETY_NET_S
    while True:
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=SAFETY_NET_S)
        except ConnectionRefusedError:
            if time.monotonic() > give_up:
                raise
            time.sleep(0.05)


def silent_client(port, test, provider):
    conn = connect(port)
    conn.sendall(hello(test, provider))
    got = receive(conn)
    if got is None or got[0] != BUFFER:
        sys.exit(f"perftest_peer: the server sent {got!r} instead of its buffer")
    conn.sendall(buffer(*parse_buffer(got[1])))
    report_until_hangup(conn)


def asking_client(port, provider, max_size):
    conn = connect(port)
    conn.sendall(hello("write_bw", provider, max_size))
    report_until_hangup(conn)


def unreachable_address(provider):
    if provider == "tcp":
        # struct sockaddr_in: family (host order), port and address (network order), padding
        return struct.pack("<H", socket.AF_INET) + struct.pack(">H", 9) + \
            socket.inet_aton("192.0.2.1") + bytes(8)
    if provider == "shm":
        return b"fi_shm://4194305:0:0\0"  # above any pid_max: no such process
    sys.exit(f"perftest_peer: no unreachable address known for provider {provider}")


def unreachable_server(port, provider):
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(1)
    listener.settimeout(SAFETY_NET_S)
    conn, _ = listener.accept()
    conn.settimeout(SAFETY_NET_S)
    if receive(conn) is None:
        sys.exit("perftest_peer: the client hung up before its Hello")
    conn.sendall(buffer(0x10000, 1 << 20, 0, 0, b"\1" * 8, unreachable_address(provider)))
    report_until_hangup(conn)  # (first the client's Buffer, unless it gave up before)


def main():
    role = sys.argv[1]
    if role == "silent-client":
        silent_client(int(sys.argv[2]), sys.argv[3], sys.argv[4])
    elif role == "asking-client":
        asking_client(int(sys.argv[2]), sys.argv[3], int(sys.argv[4]))
    elif role == "unreachable-server":
        unreachable_server(int(sys.argv[2]), sys.argv[3])
    else:
        sys.exit(f"perftest_peer: unknown role {role}")


if __name__ == "__main__":
    main()
