"""Hostile clients against a running `tessera serve` (used by tests/serve_hostile_cli.sh; stdlib only,
loopback only): a chunked body far over --max-body-bytes, slow clients trickling headers or bodies, a
flood of idle connections, over-long prompts, and malformed HTTP framing. During each attack a normal request is timed from
another loopback address (127.0.0.2: the attackers use 127.0.0.1, so the per-client cap is the
attackers'), and the server's resident memory is read before and after. Prints one line per attack
(the numbers BENCHMARKS.md records) and one line per failure; exits 1 if any.

usage: serve_hostile.py PORT SERVER_PID MAX_BODY_BYTES REQUEST_TIMEOUT_S PER_CLIENT_CAP"""
import http.client
import json
import socket
import sys
import threading
import time

port, pid, max_body, request_timeout, per_client = (int(a) for a in sys.argv[1:6])
failures = []
HANG = 30  # seconds: a generous bound against a hang, never a performance assertion


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what)


def rss_mb():
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def normal_request(path="/api", source="127.0.0.2"):
    """A small request from an address no attacker uses: (status, seconds)."""
    start = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=HANG, source_address=(source, 0))
    try:
        if path == "/health":
            conn.request("GET", "/health")
        else:
            body = json.dumps({"prompts": ["3 5 7"], "tokens_to_generate": 4, "top_k": 1})
            conn.request("PUT", "/api", body, {"Content-Type": "application/json"})
        status = conn.getresponse().status
    except OSError as e:
        status = f"{type(e).__name__}: {e}"
    conn.close()
    return status, time.monotonic() - start


def raw(data, source="127.0.0.1", wait=HANG):
    """Sends raw bytes on one connection; returns (everything answered until the server closed or `wait`
    passed, seconds until the first byte of the answer)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=wait, source_address=(source, 0))
    start = time.monotonic()
    s.sendall(data)
    out, first = b"", None
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            first = first if first is not None else time.monotonic() - start
            out += chunk
    except OSError:
        pass
    s.close()
    return out, first


def status_of(answer):
    try:
        return int(answer.split(b" ", 2)[1])
    except (IndexError, ValueError):
        return None


def report(name, before, during, after):
    print(f"attack: {name}: RSS {before:.0f} MB -> {after:.0f} MB; normal request during it: "
          f"{during[0]} in {during[1]:.3f} s")


baseline = normal_request()
check(baseline[0] == 200, f"normal request before the attacks: {baseline}")
print(f"baseline: normal request {baseline[0]} in {baseline[1]:.3f} s, RSS {rss_mb():.0f} MB")

# 1. A chunked body of up to 300 chunks of 1 MiB: refused (413) as soon as it passes --max-body-bytes.
before = rss_mb()
s = socket.create_connection(("127.0.0.1", port), timeout=HANG)
s.sendall(b"PUT /api HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
chunk = b"%x\r\n" % (1 << 20) + b" " * (1 << 20) + b"\r\n"
answer = bytearray()


def read_answer():
    try:
        while True:
            more = s.recv(65536)
            if not more:
                return
            answer.extend(more)
    except OSError:
        pass


reader = threading.Thread(target=read_answer)
reader.start()
sent = 0
while sent < 300 and not answer:
    try:
        s.sendall(chunk)
        sent += 1
    except OSError:  # the server stopped reading and closed
        break
reader.join(HANG)
answer = bytes(answer)
s.close()
during = normal_request()
after = rss_mb()
report(f"chunked body, {sent} of 300 x 1 MiB chunks sent before the answer {status_of(answer)}", before, during, after)
check(status_of(answer) == 413 and b"--max-body-bytes" in answer, f"chunked body -> 413: {answer[:300]!r}")
check(sent < 64, f"the server stopped reading the chunked body early: {sent} MiB were sent")
check(during[0] == 200, f"normal request after the chunked body: {during}")

# 2. Eight slow clients: four trickle header lines, four a body, one byte a second; each is cut off at
# --request-timeout while normal requests and /health go on.
before = rss_mb()
cut_off = [None] * 8


def slow(i):
    s = socket.create_connection(("127.0.0.1", port), timeout=HANG)
    start = time.monotonic()
    head = b"PUT /api HTTP/1.1\r\nHost: x\r\n"
    if i >= 4:
        head += b"Content-Length: 1000\r\n\r\n"
    try:
        s.sendall(head)
        while time.monotonic() - start < HANG:
            time.sleep(1)
            s.sendall(b"X-Slow: y\r\n" if i < 4 else b" ")
            s.settimeout(0.01)
            try:
                answer = s.recv(4096)
                cut_off[i] = (status_of(answer), time.monotonic() - start)
                break
            except socket.timeout:
                pass
    except OSError:  # the server closed the connection
        cut_off[i] = ("closed", time.monotonic() - start)
    s.close()


threads = [threading.Thread(target=slow, args=(i,)) for i in range(8)]
for t in threads:
    t.start()
time.sleep(1.5)
during = normal_request()
health = normal_request("/health")
for t in threads:
    t.join()
after = rss_mb()
report(f"8 slow clients (cut off after {max(c[1] for c in cut_off):.1f} s)" if all(cut_off) else "8 slow clients (not cut off)",
       before, during, after)
check(during[0] == 200 and health[0] == 200, f"normal request and /health during slow clients: {during} {health}")
check(all(c is not None and c[1] < request_timeout + 10 for c in cut_off), f"slow clients cut off: {cut_off}")
check(all(c[0] in (408, "closed") for c in cut_off if c), f"slow clients told 408: {cut_off}")

# 3. Fifty idle connections from one address: beyond --max-connections-per-client they are refused at
# once (503 naming the flag); the others wait out the idle timeout. Service goes on.
before = rss_mb()
idle = [socket.create_connection(("127.0.0.1", port), timeout=HANG) for _ in range(50)]
time.sleep(0.5)
during = normal_request()
health = normal_request("/health")
refused = 0
for s in idle:
    s.settimeout(0.2)
    try:
        answer = s.recv(4096)
        refused += status_of(answer) == 503 and b"--max-connections-per-client" in answer
    except OSError:
        pass
    s.close()
after = rss_mb()
report(f"50 idle connections ({refused} refused at once)", before, during, after)
check(during[0] == 200 and health[0] == 200, f"normal request and /health during idle connections: {during} {health}")
check(refused >= 50 - per_client - 2, f"idle connections beyond {per_client} refused: {refused}")

# 4. Over-long prompts (half the body limit of "7 ": one token per 2 bytes), four at once to /completions:
# refused by their bytes before tokenizing (no prefill, no text offsets), while a normal request goes on.
before = rss_mb()
long_answers = [None] * 4


def long_prompt(i):
    body = json.dumps({"prompt": "7 " * (max_body // 4), "max_tokens": 1})
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=HANG)
    try:
        conn.request("POST", "/completions", body, {"Content-Type": "application/json"})
        r = conn.getresponse()
        long_answers[i] = (r.status, r.read())
    except OSError as e:
        long_answers[i] = (type(e).__name__, b"")
    conn.close()


threads = [threading.Thread(target=long_prompt, args=(i,)) for i in range(4)]
for t in threads:
    t.start()
during = normal_request()
for t in threads:
    t.join()
after = rss_mb()
report(f"4 prompts of {max_body // 2} bytes to /completions ({[a[0] for a in long_answers]})", before, during, after)
check(all(a[0] == 400 and b"--max-prompt-bytes" in a[1] for a in long_answers), f"long prompts: {long_answers}")
check(during[0] == 200, f"normal request during long prompts: {during}")

# 5. HTTP framing and pipelining.
request = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
answer, _ = raw(request * 3 + b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
check(answer.count(b"HTTP/1.1 200") == 4, f"4 pipelined requests, 4 answers: {answer!r}")
body = json.dumps({"prompts": ["3 5"], "tokens_to_generate": 2, "top_k": 1}).encode()
put = b"PUT /api HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
answer, _ = raw(put % (len(body), body) * 2 + b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
check(answer.count(b"HTTP/1.1 200") == 3, f"pipelined PUTs then GET: {answer!r}")
for length, status in ((b"-1", 400), (b"abc", 400), (b"1e3", 400), (b"%d" % (max_body + 1), 413)):
    answer, first = raw(b"PUT /api HTTP/1.1\r\nHost: x\r\nContent-Length: " + length + b"\r\n\r\n{}", wait=HANG)
    said = answer.partition(b"\r\n\r\n")[2]  # the body: the headers have a Content-Length of their own
    check(status_of(answer) == status and (b"Content-Length" in said or b"--max-body-bytes" in said),
          f"Content-Length {length} -> {status}: {answer[:300]!r}")
    check(first is not None and first < request_timeout, f"Content-Length {length} answered at once: {first}")
answer, _ = raw(b"PUT /api HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 40\r\n\r\n{}")
check(status_of(answer) == 400 and b"Content-Length is given 2 times" in answer, f"two Content-Lengths: {answer!r}")
answer, _ = raw(b"PUT /api HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n{}")
check(status_of(answer) == 400 and b"Transfer-Encoding" in answer, f"Content-Length and chunked: {answer!r}")
answer, _ = raw(b"PUT /api HTTP/1.1\r\nHost: x\r\n\r\n")
check(status_of(answer) == 411, f"PUT without a length -> 411: {answer!r}")
answer, _ = raw(b"DELETE /api HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
check(status_of(answer) == 405, f"DELETE -> 405: {answer!r}")
answer, _ = raw(b"POST /elsewhere HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
check(status_of(answer) == 404, f"a chunked POST elsewhere -> 404 without reading it: {answer!r}")

# 6. A client that leaves before its answer is still logged with its address (the shell test reads the
# log for 127.0.0.3).
s = socket.create_connection(("127.0.0.1", port), source_address=("127.0.0.3", 0))
body = json.dumps({"prompts": ["1 2"], "tokens_to_generate": 20}).encode()
s.sendall(put % (len(body), body))
s.close()
final = normal_request()
check(final[0] == 200, f"normal request after everything: {final}")
print(f"after all attacks: RSS {rss_mb():.0f} MB")

print(f"serve_hostile: {len(failures)} failures")
sys.exit(1 if failures else 0)
