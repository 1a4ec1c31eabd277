"""baton_reward: reward functions for a baton run, written the way TRL's are.

A reward function takes the batch as lists and returns one float per completion:

    from baton_reward import serve

    def contains_answer(prompts, completions, answers, **columns):
        return [1.0 if a in c else 0.0 for c, a in zip(completions, answers)]

    def short(prompts, completions, answers, max_chars, **columns):  # a JSONL column
        return [0.0 if len(c) <= m else -1.0 for c, m in zip(completions, max_chars)]

    serve([contains_answer, short], "tcp://127.0.0.1:5601", weights=[1.0, 0.5])

and `baton run CONFIG --set reward.service=tcp://127.0.0.1:5601` scores every rollout and eval
batch through them.  Each call gets one batch (one rollout task: its prompts x group_size
completions, a prompt's completions consecutive; or one chunk of an evaluation), and every key of
the dataset's JSONL records other than "prompt" and "answer" as a keyword argument holding one
value per completion (None where a record lacks it), as TRL passes a dataset's extra columns.
The reward of a completion is the weighted sum of the functions' values; a function may return
None for a completion it does not apply to (it adds nothing, as in TRL), but not for all of them.

An exception in a function, or a return that is not one number (or None) per completion, is sent
back to the run as the batch's error: the task fails with the message and is retried, and the run
stops after 4 failures (docs/protocol.md, "Reward service").  The service itself keeps serving.

One thread serves every worker: a ROUTER socket takes the requests of all of them, and answers
each in arrival order.  Needs pyzmq (Debian: python3-zmq).
"""
import json
import math
import numbers
import sys
import traceback

try:
    import zmq
except ImportError as _e:  # the one dependency, named where it is missing
    raise ImportError("baton_reward needs pyzmq (Debian: python3-zmq; pip: pyzmq)") from _e

__all__ = ["serve", "reply"]

PROTOCOL_VERSION = 1  # the "version" of docs/protocol.md's requests this module answers
_ERROR_MAX = 300  # characters of an error the run reports (workers/reward_service.c keeps 300)


class _BatchError(Exception):
    """A batch this service cannot score; its text becomes the reply's "error"."""


def _finite(value):
    """Whether value is a finite real number (not a bool, which Python counts as one)."""
    return not isinstance(value, bool) and isinstance(value, numbers.Real) and \
        math.isfinite(value)


def _name(fn):
    return getattr(fn, "__name__", None) or type(fn).__name__


def _check_functions(fns, weights, correct):
    """fns as a list of callables and weights as floats, or TypeError/ValueError naming the
    argument, what it expects and what it got."""
    if callable(fns):
        fns = [fns]
    try:
        fns = list(fns)
    except TypeError:
        raise TypeError(f"serve: fns: expected a function or a list of functions, got "
                        f"{type(fns).__name__}") from None
    if not fns:
        raise ValueError("serve: fns: expected at least one reward function, got none")
    for i, fn in enumerate(fns):
        if not callable(fn):
            raise TypeError(f"serve: fns[{i}]: expected a function, got {type(fn).__name__}")
    if weights is None:
        weights = [1.0] * len(fns)
    try:
        weights = list(weights)
    except TypeError:
        raise TypeError(f"serve: weights: expected a list of {len(fns)} numbers, got "
                        f"{type(weights).__name__}") from None
    if len(weights) != len(fns):
        raise ValueError(f"serve: weights: expected one number per function ({len(fns)}), got "
                         f"{len(weights)}")
    for i, w in enumerate(weights):
        if not _finite(w):
            raise TypeError(f"serve: weights[{i}]: expected a finite number, got {w!r}")
    if correct is not None and not callable(correct):
        raise TypeError(f"serve: correct: expected a function or None, got "
                        f"{type(correct).__name__}")
    return fns, [float(w) for w in weights]


def _items(request):
    """The "items" of a decoded request of this protocol version, or _BatchError."""
    if not isinstance(request, dict):
        raise _BatchError(f"expected a request object, got {type(request).__name__}")
    version = request.get("version")
    if type(version) is not int or version != PROTOCOL_VERSION:  # not true, not 1.0: both == 1
        raise _BatchError(f"expected \"version\": {PROTOCOL_VERSION}, got "
                          f"{request.get('version')!r}")
    items = request.get("items")
    if not isinstance(items, list):
        raise _BatchError(f"\"items\": expected an array, got {type(items).__name__}")
    return items


def _batch(request):
    """(prompts, completions, answers, columns) of a decoded request, or _BatchError."""
    items = _items(request)
    prompts, completions, answers, names = [], [], [], {}
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise _BatchError(f"items[{i}]: expected an object, got {type(item).__name__}")
        for key, into in (("prompt", prompts), ("completion", completions), ("answer", answers)):
            value = item.get(key)
            if not isinstance(value, str):
                raise _BatchError(f"items[{i}].{key}: expected a string, got "
                                  f"{type(value).__name__}")
            into.append(value)
        cols = item.get("columns", {})
        if not isinstance(cols, dict):
            raise _BatchError(f"items[{i}].columns: expected an object, got "
                              f"{type(cols).__name__}")
        names.update(dict.fromkeys(cols))  # every item's keys, in first-seen order
    columns = {k: [item.get("columns", {}).get(k) for item in items] for k in names}
    return prompts, completions, answers, columns


def _call(fn, n, batch, what):
    """fn's list of n values for batch, or _BatchError saying what went wrong."""
    try:
        values = fn(*batch[:3], **batch[3])
    except Exception as e:  # the user's bug: its text goes back to the run
        traceback.print_exc(file=sys.stderr)
        raise _BatchError(f"{what} {_name(fn)} raised {type(e).__name__}: {e}") from None
    try:
        values = list(values)
    except TypeError:
        raise _BatchError(f"{what} {_name(fn)} returned {type(values).__name__}, expected a list "
                          f"of {n} values") from None
    if len(values) != n:
        raise _BatchError(f"{what} {_name(fn)} returned {len(values)} "
                          f"value{'' if len(values) == 1 else 's'} for {n} completions")
    return values


def _rewards(fns, weights, n, batch):
    """The weighted sum of the functions' values for each of the n completions."""
    total, counted = [0.0] * n, [False] * n
    for fn, w in zip(fns, weights):
        for i, v in enumerate(_call(fn, n, batch, "reward function")):
            if v is None:  # TRL: this function does not score this completion
                continue
            if not _finite(v):
                raise _BatchError(f"reward function {_name(fn)}: value {i} is {v!r}, expected a "
                                  f"finite number (or None: no reward from this function)")
            total[i] += w * float(v)
            counted[i] = True
    for i in range(n):
        if not counted[i]:
            raise _BatchError(f"completion {i}: every reward function returned None")
    return total


def reply(request, fns, weights=None, correct=None):
    """The reply (a dict) to one decoded request: {"rewards": [...]} (and "correct" when a
    correct function is given), or {"error": "..."} for a request or a function that fails."""
    fns, weights = _check_functions(fns, weights, correct)
    try:
        batch = _batch(request)
        n = len(batch[0])
        kind = request.get("kind")
        if kind not in ("rollout", "eval", "ping"):
            raise _BatchError(f"\"kind\": expected \"rollout\", \"eval\" or \"ping\", got "
                              f"{kind!r}")
        if kind == "ping" or n == 0:  # a worker starting: nothing to score
            return {"rewards": []}
        out = {"rewards": _rewards(fns, weights, n, batch)}
        if correct is not None:
            flags = _call(correct, n, batch, "correct function")
            for i, f in enumerate(flags):
                if not isinstance(f, bool):
                    raise _BatchError(f"correct function {_name(correct)}: value {i} is {f!r}, "
                                      f"expected True or False")
            out["correct"] = flags
        return out
    except _BatchError as e:
        return {"error": str(e)[:_ERROR_MAX]}


def _decode(body):
    """The JSON value of the frames of one request's body, or _BatchError when it is not one
    frame of JSON."""
    if len(body) != 1:
        raise _BatchError(f"expected a request of one frame, got {len(body)}")
    try:  # baton sends UTF-8 (docs/protocol.md); other bytes would be scored as U+FFFD unseen
        text = body[0].decode("utf-8")
    except UnicodeDecodeError as e:
        raise _BatchError(f"request: not valid UTF-8 at byte {e.start}: expected UTF-8 JSON") \
            from None
    try:
        return json.loads(text)
    except ValueError as e:
        raise _BatchError(f"request: not valid JSON: {e}") from None
    except RecursionError:  # "[[[[..." a million deep: json's decoder recurses per level
        raise _BatchError("request: not valid JSON: nested too deep to decode") from None


def _answer(body, fns, weights, correct):
    """The reply frame to the frames of one request's body."""
    try:
        out = reply(_decode(body), fns, weights, correct)
    except _BatchError as e:
        out = {"error": str(e)}
    return json.dumps(out, allow_nan=False).encode()


def _bind(ctx, endpoint, who, setup=None):
    """A ROUTER socket of ctx bound at endpoint (setup(sock) first, when given), or zmq.ZMQError
    naming who and the endpoint."""
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    if setup is not None:
        setup(sock)
    try:
        sock.bind(endpoint)
    except zmq.ZMQError as e:
        sock.close()
        raise zmq.ZMQError(e.errno, f"{who}: cannot bind {endpoint}: {e}") from None
    return sock


def _requests(sock):
    """(envelope, body frames) of each request a REQ peer sends to the ROUTER sock: its routing
    id, a request id (ZMQ_REQ_CORRELATE) and an empty frame, all of which go back in front of the
    reply.  A message of a peer that is not a REQ cannot be answered and is passed over."""
    while True:
        frames = sock.recv_multipart()
        if b"" in frames:
            cut = frames.index(b"") + 1
            yield frames[:cut], frames[cut:]


def serve(fns, endpoint, weights=None, *, correct=None):
    """Binds a ZeroMQ ROUTER socket at endpoint ("tcp://HOST:PORT" or "ipc://PATH") and answers
    every worker's requests with the weighted sum of fns (a function or a list of them; weights:
    one number per function, default 1 each) until interrupted (SIGINT) or killed.

    Each function is called as fn(prompts, completions, answers, **columns) and returns one
    number (or None) per completion.  correct, when given, is called the same way and returns one
    True or False per completion: the run's accuracy (else a completion is correct when its reward
    is >= 1).  Errors in the arguments raise TypeError or ValueError before anything is bound;
    an endpoint ZeroMQ refuses raises zmq.ZMQError naming it."""
    fns, weights = _check_functions(fns, weights, correct)
    sock = _bind(zmq.Context.instance(), endpoint, "baton_reward")
    names = ", ".join(f"{_name(f)} x {w:g}" for f, w in zip(fns, weights))
    print(f"baton_reward: serving {names} on {endpoint}", file=sys.stderr, flush=True)
    try:
        for envelope, body in _requests(sock):
            sock.send_multipart(envelope + [_answer(body, fns, weights, correct)])
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
