"""baton_reward.env: serve a multi-turn environment (a game, a tool, a user simulator) to a baton
run over ZeroMQ (docs/protocol.md, "Environment service").

One object per episode, made by make_env(prompt, answer, **columns) when the episode starts:

    from baton_reward.env import serve_env

    class Guess:
        def __init__(self, prompt, answer, low=1, high=100, **columns):
            self.target = int(answer)
        def reset(self):
            return "Guess my number.", False               # (observation, done)
        def step(self, action_text, action_ids):
            g = int(action_text.split("<guess>")[1].split("</guess>")[0])
            if g == self.target:
                return "correct", 1.0, True, {"tool_called": True}
            return ("higher" if g < self.target else "lower"), 0.0, False, {"tool_called": True}

    serve_env(Guess, "tcp://127.0.0.1:5602", stop=["</guess>"], secret_key="keys/env.key")

The run's rollout workers send every episode of a rollout job waiting for the environment in one
request: "reset" calls make_env and reset() for each starting episode, "step" calls step() of each
episode's object with the model's turn (its text, up to and including the stop string that ended
it, and its token ids).  An episode's object is dropped once it reports done.  stop names the
strings that end a model turn without ending the episode (the tool call's closing tag).

An exception in make_env, reset or step, a reply of the wrong shape (an observation that is not a
str, a reward that is not a finite number, done that is not a bool, info that is not a dict), or a
step for an episode this service does not hold is sent back as the batch's error: the rollout task
fails with the text and is retried.  The service goes on serving.

A worker resends a request it got no reply to with the same "request" number; the service answers a
repeated number from the same worker with the reply it sent before, without stepping its episodes
again.  One thread serves every worker (a ROUTER socket).  Needs pyzmq (Debian: python3-zmq).
"""
import json
import os
import sys
import traceback

from baton_reward import _ERROR_MAX, _BatchError, _bind, _decode, _finite, _items, _requests, zmq

__all__ = ["serve_env", "read_key"]

_OBSERVATION_MAX = 65536  # bytes of UTF-8 (BT_ENV_OBSERVATION_MAX, include/baton/env.h)


def _key_lines(path):
    """The lines of a key file, stripped, but blank lines and lines starting with '#'."""
    with open(path, encoding="ascii") as f:
        return [ln.strip() for ln in f if ln.strip() and not ln.lstrip().startswith("#")]


def read_key(path):
    """The one key of a `baton keygen` key file (NAME.key or NAME.pub): 40 characters of Z85, as
    bytes.  Blank lines and lines starting with '#' are skipped."""
    keys = _key_lines(path)
    if len(keys) != 1 or len(keys[0]) != 40:
        raise ValueError(f"{path}: expected one 40-character Z85 key, got {len(keys)} lines")
    return keys[0].encode("ascii")


def _allowed_keys(allow):
    """The public keys of allow: a .pub file (one key a line) or a directory of them."""
    paths = [allow] if os.path.isfile(allow) else [
        os.path.join(allow, n) for n in sorted(os.listdir(allow)) if n.endswith(".pub")]
    keys = set()
    for p in paths:
        keys.update(k.encode("ascii") for k in _key_lines(p))
    return keys


def _field(item, i, key, types, what):
    value = item.get(key)
    if isinstance(value, bool) and bool not in types or not isinstance(value, types):
        raise _BatchError(f"items[{i}].{key}: expected {what}, got {type(value).__name__}")
    return value


def _observation(value, episode, where):
    if not isinstance(value, str):
        raise _BatchError(f"episode {episode}: {where} returned an observation of type "
                          f"{type(value).__name__}, expected str")
    if len(value.encode("utf-8", errors="replace")) > _OBSERVATION_MAX:
        raise _BatchError(f"episode {episode}: {where} returned an observation over "
                          f"{_OBSERVATION_MAX} bytes")
    return value


def _done(value, episode, where):
    if not isinstance(value, bool):
        raise _BatchError(f"episode {episode}: {where} returned done of type "
                          f"{type(value).__name__}, expected bool")
    return value


def _user(fn, episode, where, *args, **kwargs):
    """fn(*args, **kwargs), its exception as the batch's error (traceback on stderr)."""
    try:
        return fn(*args, **kwargs)
    except Exception as e:  # the user's bug: its text goes back to the run
        traceback.print_exc(file=sys.stderr)
        raise _BatchError(f"episode {episode}: {where} raised {type(e).__name__}: {e}") from None


def _reset(make_env, episodes, items):
    out = []
    for i, item in enumerate(items):
        e = _field(item, i, "episode", (int,), "an integer")
        prompt = _field(item, i, "prompt", (str,), "a string")
        answer = _field(item, i, "answer", (str,), "a string")
        columns = item.get("columns", {})
        if not isinstance(columns, dict):
            raise _BatchError(f"items[{i}].columns: expected an object, got "
                              f"{type(columns).__name__}")
        env = _user(make_env, e, "make_env", prompt, answer, **columns)
        got = _user(env.reset, e, "reset")
        if not isinstance(got, tuple) or len(got) != 2:
            raise _BatchError(f"episode {e}: reset returned {type(got).__name__}, expected "
                              f"(observation, done)")
        obs, done = _observation(got[0], e, "reset"), _done(got[1], e, "reset")
        episodes.pop(e, None)
        if not done:
            episodes[e] = env
        out.append({"episode": e, "observation": obs, "done": done})
    return out


def _step(episodes, items):
    out = []
    for i, item in enumerate(items):
        e = _field(item, i, "episode", (int,), "an integer")
        text = _field(item, i, "action_text", (str,), "a string")
        ids = _field(item, i, "action_ids", (list,), "an array of token ids")
        env = episodes.get(e)
        if env is None:
            raise _BatchError(f"episode {e}: not an episode of this service (never reset, or "
                              f"already done)")
        got = _user(env.step, e, "step", text, ids)
        if not isinstance(got, tuple) or len(got) != 4:
            raise _BatchError(f"episode {e}: step returned {type(got).__name__}, expected "
                              f"(observation, reward, done, info)")
        obs, reward, done, info = got
        obs, done = _observation(obs, e, "step"), _done(done, e, "step")
        if not _finite(reward):
            raise _BatchError(f"episode {e}: step returned reward {reward!r}, expected a finite "
                              f"number")
        if info is None:
            info = {}
        if not isinstance(info, dict):
            raise _BatchError(f"episode {e}: step returned info of type {type(info).__name__}, "
                              f"expected dict")
        for key in ("tool_called", "tool_error"):
            if key in info and not isinstance(info[key], bool):
                raise _BatchError(f"episode {e}: step returned info[{key!r}] = {info[key]!r}, "
                                  f"expected bool")
        if done:
            del episodes[e]
        out.append({"episode": e, "observation": obs, "reward": float(reward), "done": done,
                    "info": info})
    return out


def reply(request, make_env, episodes, stop=()):
    """The reply (a dict) to one decoded request; episodes: the dict of episode id -> object this
    service holds (updated)."""
    try:
        items = _items(request)
        if not all(isinstance(x, dict) for x in items):
            raise _BatchError("\"items\": expected an array of objects")
        kind = request.get("kind")
        if kind == "hello":
            return {"items": [], "stop": list(stop)}
        if kind == "reset":
            return {"items": _reset(make_env, episodes, items)}
        if kind == "step":
            return {"items": _step(episodes, items)}
        raise _BatchError(f"\"kind\": expected \"hello\", \"reset\" or \"step\", got {kind!r}")
    except _BatchError as e:
        return {"error": str(e)[:_ERROR_MAX]}


def _encode(out):
    try:
        return json.dumps(out, allow_nan=False).encode()
    except (TypeError, ValueError) as e:  # an info that JSON cannot carry
        return json.dumps({"error": f"reply: not JSON: {e}"[:_ERROR_MAX]}).encode()


def serve_env(make_env, endpoint, *, stop=(), secret_key=None, allow=None):
    """Binds a ZeroMQ ROUTER socket at endpoint ("tcp://HOST:PORT" or "ipc://PATH") and serves
    episodes of make_env until interrupted (SIGINT) or killed.

    stop: the strings that end a model turn (announced in the reply to "hello").  secret_key: a
    `baton keygen` NAME.key file: the socket becomes a CURVE server (clients need its NAME.pub);
    allow: with it, a .pub file or a directory of them, the only client keys let in (default:
    any client that knows the server's public key)."""
    if not callable(make_env):
        raise TypeError(f"serve_env: make_env: expected a callable, got "
                        f"{type(make_env).__name__}")
    stop = list(stop)
    if not all(isinstance(s, str) and s for s in stop):
        raise TypeError("serve_env: stop: expected a list of non-empty strings")
    if allow is not None and secret_key is None:
        raise ValueError("serve_env: allow needs secret_key (CURVE)")
    ctx = zmq.Context.instance()
    auth = None
    if allow is not None:
        from zmq.auth.thread import ThreadAuthenticator
        keys = _allowed_keys(allow)

        class _Allow:
            def callback(self, domain, key):
                return key in keys

        auth = ThreadAuthenticator(ctx)
        auth.start()
        auth.configure_curve_callback("*", _Allow())

    def curve(sock):
        if secret_key is not None:
            secret = read_key(secret_key)
            sock.curve_secretkey = secret
            sock.curve_publickey = zmq.curve_public(secret)
            sock.curve_server = True

    sock = _bind(ctx, endpoint, "baton_reward.env", curve)
    print(f"baton_reward.env: serving {getattr(make_env, '__name__', 'make_env')} on {endpoint}",
          file=sys.stderr, flush=True)
    episodes, last = {}, {}  # episode id -> object; peer -> (request number, reply frame)
    try:
        for envelope, body in _requests(sock):
            peer = envelope[0]
            try:
                request = _decode(body)
            except _BatchError as e:
                out = _encode({"error": str(e)[:_ERROR_MAX]})
            else:
                number = request.get("request") if isinstance(request, dict) else None
                seen = last.get(peer)
                if number is not None and seen and seen[0] == number:
                    out = seen[1]  # a resend: the reply already given, nothing stepped again
                else:
                    out = _encode(reply(request, make_env, episodes, stop))
                    last[peer] = (number, out)
            sock.send_multipart(envelope + [out])
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
        if auth is not None:
            auth.stop()
