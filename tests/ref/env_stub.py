"""A misbehaving environment service (tests/test_env_service.c): a raw ROUTER whose reply to each
request is chosen by its first item's action text (step) or prompt (reset).  Run as:
env_stub.py ENDPOINT."""
import json
import sys

import zmq

BIG = 65537  # one byte over BT_ENV_OBSERVATION_MAX


def items(request, reward="0.5"):
    return [f'{{"episode": {it["episode"]}, "observation": "obs {it["episode"]}", '
            f'"reward": {reward}, "done": false}}' for it in request["items"]]


def body(request, mode, n):
    its = items(request)
    if mode == "short":
        its = its[:-1]
    elif mode == "extra":
        its = its + ['{"episode": 424242, "observation": "", "reward": 0, "done": false}']
    elif mode == "nan":
        its = items(request, "NaN")
    elif mode == "noobs":
        its[-1] = its[-1].replace('"observation"', '"obs"')
    elif mode == "big":
        its[0] = its[0].replace(f'"obs {request["items"][0]["episode"]}"', '"' + "x" * BIG + '"')
    elif mode == "error":
        return '{"error": "the tool server crashed"}'
    elif mode == "wrongep":
        its[0] = its[0].replace(f'"episode": {request["items"][0]["episode"]}', '"episode": 9', 1)
    elif mode == "badinfo":
        its[0] = its[0].replace('"done": false', '"done": false, "info": {"tool_called": 1}')
    elif mode == "nodone":
        its[0] = its[0].replace('"done": false', '"done": "no"')
    elif mode == "hello":
        return '{"items": [], "stop": ["</tool>", "\\n\\nUser:"]}'
    elif mode.startswith("r="):
        its = items(request, mode[2:])
    return '{"items": [' + ", ".join(its) + ']}'


def main():
    sock = zmq.Context.instance().socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.bind(sys.argv[1])
    held = None  # the envelope of an unanswered request ("silent", "once")
    seen = set()
    while True:
        frames = sock.recv_multipart()
        cut = frames.index(b"") + 1
        request = json.loads(frames[cut])
        if request["kind"] == "hello":
            mode = "hello"
        elif request["kind"] == "reset":
            mode = request["items"][0]["prompt"]
        else:
            mode = request["items"][0]["action_text"]
        n = len(request["items"])
        if mode == "silent":
            held = (frames[:cut], request)
            continue
        if mode == "once" and request["request"] not in seen:  # the first attempt goes unanswered
            seen.add(request["request"])
            continue
        if mode == "stale" and held:  # first a late reply to the abandoned request
            sock.send_multipart(held[0] + [body(held[1], "r=99", n).encode()])
            held = None
        reply = body(request, "r=7" if mode == "once" else "r=3" if mode == "stale" else mode, n)
        sock.send_multipart(frames[:cut] + [reply.encode()])


if __name__ == "__main__":
    main()
