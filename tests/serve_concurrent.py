"""Sends the requests of a JSON file (a list of PUT /api bodies) to a running `tessera serve` all at
once, one thread each, and prints a JSON list of [HTTP status, response] in the file's order.
Loopback only. usage: serve_concurrent.py PORT REQUESTS.json"""
import json
import sys
import threading
import urllib.error
import urllib.request

port, path = int(sys.argv[1]), sys.argv[2]
bodies = json.load(open(path))
assert len(bodies) <= 64, "bounded: at most 64 requests"
results = [None] * len(bodies)
barrier = threading.Barrier(len(bodies))


def send(i):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/api", data=json.dumps(bodies[i]).encode(), method="PUT",
                                 headers={"Content-Type": "application/json"})
    barrier.wait()
    try:
        with urllib.request.urlopen(req, timeout=300) as resp:
            results[i] = [resp.status, json.loads(resp.read())]
    except urllib.error.HTTPError as e:
        results[i] = [e.code, json.loads(e.read() or b"{}")]


threads = [threading.Thread(target=send, args=(i,)) for i in range(len(bodies))]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(json.dumps(results))
