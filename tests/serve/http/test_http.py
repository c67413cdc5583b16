"""The HTTP API (docs/HTTP.md) against the real `lockstep serve --http` on loopback: every
endpoint, every error, equality with `lockstep generate`, streaming, batching, drain."""
import hashlib
import http.client
import json
import re
import signal
import socket
import struct
import threading
import time

import pytest

from conftest import generate, read_frame, run


def completion(server, **body):
    status, answer = server.post("/v1/completions", body)
    assert status == 200, answer
    return answer


def stream(server, body, timeout=30):
    """The events of a streamed completion, parsed, and whether [DONE] ended them."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=timeout)
    conn.request("POST", "/v1/completions", body=json.dumps({**body, "stream": True}))
    r = conn.getresponse()
    assert r.status == 200
    assert r.getheader("Content-Type") == "text/event-stream"
    raw = r.read().decode("utf-8")  # every piece is valid UTF-8
    conn.close()
    events = [e[len("data: "):] for e in raw.split("\n\n") if e]
    assert all(e for e in events)
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


CASES = [
    dict(prompt="Hello", tokens=20, temperature="0", seed=0),
    dict(prompt="Hello", tokens=40, temperature="0.8", seed=5),
    dict(prompt="The quick brown fox", tokens=70, temperature="1", seed=9, top_k=20),  # past the 32-byte window
    dict(prompt="abc", tokens=30, temperature="0.7", seed=2, top_p="0.9"),
    dict(prompt="x" * 50, tokens=10, temperature="0.5", seed=1),  # prompt longer than the window
]


@pytest.mark.parametrize("case", CASES)
def test_completion_equals_generate(shared_server, model, case):
    expected = generate(model, case["prompt"], case["tokens"], case["temperature"], case["seed"],
                        case.get("top_k", 0), case.get("top_p", "1"))
    body = dict(prompt=case["prompt"], max_tokens=case["tokens"], temperature=float(case["temperature"]),
                seed=case["seed"], top_k=case.get("top_k", 0), top_p=float(case.get("top_p", "1")))
    answer = completion(shared_server, **body)
    choice = answer["choices"][0]
    assert choice["text"] == expected.decode("utf-8", errors="replace")
    assert choice["sha256"] == hashlib.sha256(expected).hexdigest()
    assert choice["finish_reason"] == "length"
    assert answer["object"] == "text_completion" and answer["id"].startswith("cmpl-")
    assert answer["model"] == "tiny" and isinstance(answer["created"], int)
    assert answer["usage"] == {"prompt_tokens": len(case["prompt"]), "completion_tokens": case["tokens"],
                               "total_tokens": len(case["prompt"]) + case["tokens"]}
    # Streamed: the same text, never split inside a character, then finish_reason and [DONE].
    events = stream(shared_server, body)
    assert "".join(e["choices"][0]["text"] for e in events) == choice["text"]
    assert events[-1]["choices"][0]["finish_reason"] == "length"
    assert events[-1]["choices"][0]["sha256"] == choice["sha256"]


def test_token_array_prompt_and_echo(shared_server, model):
    expected = generate(model, "Hi there", 12, "0.9", 4)
    a = completion(shared_server, prompt=list(b"Hi there"), max_tokens=12, temperature=0.9, seed=4, echo=True)
    assert a["choices"][0]["text"] == ("Hi there".encode() + expected).decode("utf-8", errors="replace")


def test_stop_strings(shared_server, model):
    full = generate(model, "Hello", 40, "0.8", 5)
    at = next(i for i in range(3, len(full)) if 0x21 <= full[i] < 0x7f and full[i] not in full[:i])
    stop = chr(full[at])
    expected = generate(model, "Hello", 40, "0.8", 5, stop=stop)
    assert expected == full[:at + 1]  # generate's text ends with the stop string, which it keeps
    a = completion(shared_server, prompt="Hello", max_tokens=40, temperature=0.8, seed=5, stop=[stop, "zzzz"])
    assert a["choices"][0]["text"] == expected.decode("utf-8", errors="replace")
    assert a["choices"][0]["finish_reason"] == "stop"
    # Up to 16 (lm-evaluation-harness sends a task's whole `until` list), the one that ends it last.
    many = ["zz%d" % i for i in range(15)] + [stop]
    b = completion(shared_server, prompt="Hello", max_tokens=40, temperature=0.8, seed=5, stop=many)
    assert b["choices"][0]["text"] == a["choices"][0]["text"] and b["choices"][0]["finish_reason"] == "stop"


def test_n_choices_use_seed_plus_i(shared_server, model):
    a = completion(shared_server, prompt="Hello", max_tokens=15, temperature=1.0, seed=100, n=3)
    assert [c["index"] for c in a["choices"]] == [0, 1, 2]
    for i, c in enumerate(a["choices"]):
        assert c["seed"] == 100 + i
        assert c["text"] == generate(model, "Hello", 15, "1", 100 + i).decode("utf-8", errors="replace")


def test_seed_picked_and_returned(shared_server):
    a = completion(shared_server, prompt="Hello", max_tokens=15, temperature=1.0)
    seed = a["seed"]
    b = completion(shared_server, prompt="Hello", max_tokens=15, temperature=1.0, seed=seed)
    assert a["choices"][0]["text"] == b["choices"][0]["text"]


def test_logprobs(shared_server):
    a = completion(shared_server, prompt="Hello", max_tokens=6, temperature=0, seed=0, logprobs=3)
    lp = a["choices"][0]["logprobs"]
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == 6
    assert all(len(t) == 3 for t in lp["top_logprobs"])
    assert all(x <= 0 for x in lp["token_logprobs"])
    # Greedy: the chosen token is the most likely one.
    for tok, top, x in zip(lp["tokens"], lp["top_logprobs"], lp["token_logprobs"]):
        assert max(top.values()) == x and top[tok] == x
    b = completion(shared_server, prompt="Hello", max_tokens=6, temperature=0, seed=0, logprobs=3)
    assert a["choices"][0]["logprobs"] == b["choices"][0]["logprobs"]



def token_id(text):
    """A byte model's token as logprobs show it ("bytes:\\xNN" or the character) as its id."""
    return int(text[len("bytes:\\x"):], 16) if text.startswith("bytes:\\x") else ord(text)


def test_echo_with_logprobs_scores_the_prompt(shared_server):
    a = completion(shared_server, prompt="Hello, world", max_tokens=0, logprobs=2, echo=True)
    choice = a["choices"][0]
    lp = choice["logprobs"]
    assert choice["text"] == "Hello, world" and a["usage"]["completion_tokens"] == 0
    assert lp["tokens"] == list("Hello, world") and lp["text_offset"] == list(range(12))
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    assert all(x <= 0 for x in lp["token_logprobs"][1:])
    assert all(len(t) == 2 and max(t.values()) >= x for t, x in zip(lp["top_logprobs"][1:], lp["token_logprobs"][1:]))
    # Then the generated tokens, their offsets after the echoed prompt.
    b = completion(shared_server, prompt="Hello, world", max_tokens=3, temperature=0, logprobs=2, echo=True)
    lb = b["choices"][0]["logprobs"]
    assert len(lb["tokens"]) == 15 and lb["text_offset"][12:] == [12, 13, 14]
    assert {k: v[:12] for k, v in lb.items()} == lp


def test_prompt_scores_are_the_generations_own(shared_server):
    # A greedy generation's log-probabilities come from its decoding steps; the same tokens as a
    # prompt are scored by a forward pass over it: the two paths give the same bits.
    g = completion(shared_server, prompt="Once upon", max_tokens=5, temperature=0, logprobs=3)["choices"][0]["logprobs"]
    ids = list(b"Once upon") + [token_id(t) for t in g["tokens"]]
    e = completion(shared_server, prompt=ids, max_tokens=0, logprobs=3, echo=True)["choices"][0]["logprobs"]
    assert e["token_logprobs"][9:] == g["token_logprobs"]
    assert e["top_logprobs"][9:] == g["top_logprobs"]
    # A prompt past the 32-token window keeps its last 32: the tokens left out have no score, and
    # the kept ones score as that window alone.
    long = list(b"x" * 20) + ids
    f = completion(shared_server, prompt=long, max_tokens=0, logprobs=1, echo=True)["choices"][0]["logprobs"]
    dropped = len(long) - 32
    assert f["token_logprobs"][:dropped + 1] == [None] * (dropped + 1)
    w = completion(shared_server, prompt=long[dropped:], max_tokens=0, logprobs=1, echo=True)["choices"][0]["logprobs"]
    assert f["token_logprobs"][dropped:] == w["token_logprobs"]


def test_tokenizer_endpoints(shared_server):
    status, _, body = shared_server.request("GET", "/tokenizer_info")
    info = json.loads(body)
    assert status == 200 and info == {"tokenizer_class": "bytes", "vocab_size": 256, "model_max_length": 32,
                                      "bos_token": None, "eos_token": None, "unk_token": None, "pad_token": None}
    for special in (True, False):  # a byte model has no special tokens
        status, t = shared_server.post("/tokenize", {"prompt": "h\u00e9 \u2603", "add_special_tokens": special})
        assert status == 200 and t == {"tokens": list("hé ☃".encode()), "count": 7, "max_model_len": 32}
    status, d = shared_server.post("/detokenize", {"tokens": list("hé ☃".encode())})
    assert status == 200 and d == {"prompt": "hé ☃"}
    status, d = shared_server.post("/detokenize", {"tokens": [104, 0xff, 0xc3]})  # invalid UTF-8, as completions show it
    assert status == 200 and d == {"prompt": "h\ufffd\ufffd"}
    expect_error(shared_server, "POST", "/detokenize", {"tokens": [1, 256]}, 400, "tokens[1]")
    expect_error(shared_server, "POST", "/detokenize", {"tokens": "abc"}, 400, "tokens")
    expect_error(shared_server, "POST", "/tokenize", {"text": "abc"}, 400, "prompt")
    expect_error(shared_server, "POST", "/tokenize", {"prompt": "a", "add_special_tokens": 1}, 400, "add_special_tokens")
    expect_error(shared_server, "POST", "/tokenize", {"messages": []}, 400, "messages")
    expect_error(shared_server, "POST", "/tokenize", {"prompt": "a", "model": "other"}, 404, "model")
    expect_error(shared_server, "GET", "/tokenize", None, 405)
    expect_error(shared_server, "POST", "/tokenize", b"[[[", 400)


def remote_tokenizer_supported(server):
    """lm-evaluation-harness's check_remote_tokenizer_support: /tokenizer_info has an eos_token
    key and /tokenize answers a list of tokens; its tokenizer_backend=auto then encodes through
    the server instead of a Hugging Face tokenizer."""
    status, _, body = server.request("GET", "/tokenizer_info")
    if status != 200 or "eos_token" not in json.loads(body):
        return False
    status, t = server.post("/tokenize", {"prompt": "test", "add_special_tokens": False})
    return status == 200 and isinstance(t.get("tokens"), list)


def test_lm_evaluation_harness_loglikelihood_request(shared_server):
    # lm-evaluation-harness's local-completions model finds the server's tokenizer, encodes the
    # context and continuation through it, scores them with this payload (its prompt a batch of
    # one token list) and reads token_logprobs[ctxlen:-1] (the last is the generated token's);
    # is_greedy compares each with its top_logprobs' maximum.
    assert remote_tokenizer_supported(shared_server)
    encode = lambda text: shared_server.post("/tokenize", {"prompt": text, "add_special_tokens": False})[1]["tokens"]
    context, continuation = encode("The cat sat on the "), encode("mat")
    assert context + continuation == list(b"The cat sat on the mat")
    body = {"model": "tiny", "prompt": [context + continuation], "temperature": 0, "max_tokens": 1,
            "logprobs": 1, "seed": 1234, "echo": True}
    status, out = shared_server.post("/v1/completions", body)
    assert status == 200, out
    lp = out["choices"][0]["logprobs"]
    ctxlen = len(context)
    scores, tops = lp["token_logprobs"][ctxlen:-1], lp["top_logprobs"][ctxlen:-1]
    assert len(scores) == len(continuation) and all(x < 0 for x in scores)
    assert all(max(top.values()) >= x for top, x in zip(tops, scores))
    # The same continuation scored alone (max_tokens 0) gives the same numbers.
    alone = completion(shared_server, prompt=context + continuation, max_tokens=0, logprobs=1, echo=True)
    assert alone["choices"][0]["logprobs"]["token_logprobs"][ctxlen:] == scores


def test_streamed_echo_with_logprobs(shared_server):
    body = dict(prompt="Hi there", max_tokens=4, temperature=0.8, seed=3, logprobs=1, echo=True, n=2)
    whole = completion(shared_server, **body)
    events = stream(shared_server, body)
    for i in range(2):
        mine = [e["choices"][0] for e in events if e["choices"][0]["index"] == i]
        # The first event is the echoed prompt with its scores, then one per token.
        assert mine[0]["text"] == "Hi there" and mine[0]["logprobs"]["tokens"] == list("Hi there")
        merged = {k: sum((c["logprobs"][k] for c in mine if c["logprobs"]), []) for k in mine[0]["logprobs"]}
        assert merged == whole["choices"][i]["logprobs"]
        assert "".join(c["text"] for c in mine) == whole["choices"][i]["text"]


def test_health_models_playground(shared_server):
    status, headers, body = shared_server.request("GET", "/health")
    assert status == 200 and json.loads(body)["status"] == "ok"
    status, _, body = shared_server.request("GET", "/v1/models")
    m = json.loads(body)
    assert status == 200 and m["object"] == "list" and m["data"][0]["id"] == "tiny"
    assert m["data"][0]["window"] == m["data"][0]["max_model_len"] == 32
    status, headers, body = shared_server.request("GET", "/")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    page = body.decode()
    assert "<textarea" in page and "/v1/completions" in page and "sha256" in page
    assert "https://" not in page and "http://" not in page  # nothing from the internet


def test_one_model_by_its_id(shared_server):
    _, _, listed = shared_server.request("GET", "/v1/models")
    for path in ("/v1/models/tiny", "/v1/models/ti%6Ey"):  # clients escape a name's reserved bytes
        status, _, body = shared_server.request("GET", path)
        assert status == 200 and json.loads(body) == json.loads(listed)["data"][0]
    e = expect_error(shared_server, "GET", "/v1/models/other", None, 404, "model")
    assert e["code"] == "model_not_found" and "'tiny'" in e["message"]


def expect_error(server, method, path, body, status, param=None, headers=None):
    got, _, data = server.request(method, path, body, headers)
    assert got == status, data
    e = json.loads(data)["error"]
    assert set(e) == {"message", "type", "param", "code"}
    if param:
        assert e["param"] == param and param in e["message"], e
    return e


@pytest.mark.parametrize("body,param", [
    ({"max_tokens": 3}, "prompt"),
    ({"prompt": 5}, "prompt"),
    ({"prompt": ""}, "prompt"),
    ({"prompt": [1, 300]}, "prompt[1]"),
    ({"prompt": "a", "temperature": -1}, "temperature"),
    ({"prompt": "a", "temperature": "hot"}, "temperature"),
    ({"prompt": "a", "top_p": 0}, "top_p"),
    ({"prompt": "a", "top_k": -1}, "top_k"),
    ({"prompt": "a", "max_tokens": -1}, "max_tokens"),
    ({"prompt": "a", "seed": -1}, "seed"),
    ({"prompt": "a", "n": 0}, "n"),
    ({"prompt": "a", "stop": [chr(97 + i) for i in range(17)]}, "stop"),
    ({"prompt": "a", "logprobs": 21}, "logprobs"),
    ({"prompt": "a", "stream": "yes"}, "stream"),
    ({"prompt": "a", "echo": 1}, "echo"),
])
def test_bad_fields_are_400_naming_them(shared_server, body, param):
    expect_error(shared_server, "POST", "/v1/completions", json.dumps(body).encode(), 400, param)


@pytest.mark.parametrize("path,body,param", [
    ("/v1/completions", {"prompt": "a", "presence_penalty": 0.5}, "presence_penalty"),
    ("/v1/completions", {"prompt": "a", "frequency_penalty": -1}, "frequency_penalty"),
    ("/v1/completions", {"prompt": "a", "repetition_penalty": 1.2}, "repetition_penalty"),
    ("/v1/completions", {"prompt": "a", "logit_bias": {"65": 100}}, "logit_bias"),
    ("/v1/completions", {"prompt": "a", "suffix": "zz"}, "suffix"),
    ("/v1/completions", {"prompt": ["a"] * 65}, "prompt"),
    ("/v1/completions", {"prompt": ["a"] * 9, "n": 8}, "n"),
    ("/v1/completions", {"prompt": ["a", ""]}, "prompt[1]"),
    ("/v1/completions", {"prompt": [[97], [98, 256]]}, "prompt[1][1]"),
    ("/v1/completions", {"prompt": ["a", 5]}, "prompt[1]"),
    ("/v1/completions", {"prompt": "a", "stream_options": {"include_usage": True}}, "stream_options"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "a"}],
                              "response_format": {"type": "yaml"}}, "response_format.type"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "a"}],
                              "tools": [{"type": "function", "function": {"name": "f"}}]}, "tools"),
])
def test_fields_that_would_change_the_answer_are_refused_not_ignored(shared_server, path, body, param):
    expect_error(shared_server, "POST", path, json.dumps(body).encode(), 400, param)


def test_neutral_values_of_unsupported_fields_and_a_one_prompt_list_are_taken(shared_server):
    # What SDKs send by default (LangChain: the penalties at 0, logit_bias {}, the prompt in a list).
    plain = completion(shared_server, prompt="ab", max_tokens=5, seed=3)["choices"][0]["sha256"]
    neutral = dict(presence_penalty=0, frequency_penalty=0.0, repetition_penalty=1, logit_bias={}, suffix=None,
                   user="u")
    assert completion(shared_server, prompt="ab", max_tokens=5, seed=3, **neutral)["choices"][0]["sha256"] == plain
    assert completion(shared_server, prompt=["ab"], max_tokens=5, seed=3)["choices"][0]["sha256"] == plain
    assert completion(shared_server, prompt=[[97, 98]], max_tokens=5, seed=3)["choices"][0]["sha256"] == plain


def test_a_batch_of_prompts_gives_each_prompt_its_own_answers(shared_server):
    # OpenAI's list of prompts (LangChain sends its batches so): choice index p * n + i, each the
    # answer that prompt's i-th choice gets alone (seed + i), echo and logprobs per prompt.
    prompts = ["ab", [72, 105], "The quick"]
    body = dict(max_tokens=6, temperature=0.9, seed=11, n=2, echo=True, logprobs=1)
    batch = completion(shared_server, prompt=prompts, **body)
    assert [c["index"] for c in batch["choices"]] == list(range(6))
    for p, prompt in enumerate(prompts):
        alone = completion(shared_server, prompt=prompt, **body)
        for i in range(2):
            got, want = batch["choices"][p * 2 + i], alone["choices"][i]
            assert {k: v for k, v in got.items() if k != "index"} == {k: v for k, v in want.items() if k != "index"}
    assert batch["usage"]["prompt_tokens"] == 2 + 2 + 9  # each prompt once, whatever n
    assert batch["usage"]["completion_tokens"] == 6 * 6
    events = stream(shared_server, dict(prompt=prompts, **body))
    for k in range(6):
        mine = [e["choices"][0] for e in events if e["choices"][0]["index"] == k]
        assert "".join(c["text"] for c in mine) == batch["choices"][k]["text"]
        assert mine[-1]["sha256"] == batch["choices"][k]["sha256"]


def test_stream_options_include_usage_adds_a_last_chunk_with_the_usage(shared_server):
    events = stream(shared_server, dict(prompt="ab", max_tokens=6, seed=4, n=2,
                                        stream_options={"include_usage": True}))
    *chunks, last = events
    assert last["choices"] == [] and last["usage"] == {"prompt_tokens": 2, "completion_tokens": 12,
                                                       "total_tokens": 14}
    assert chunks and all(c["usage"] is None and len(c["choices"]) == 1 for c in chunks)
    plain = stream(shared_server, dict(prompt="ab", max_tokens=6, seed=4, n=2))
    assert all("usage" not in c for c in plain)
    # The choices' events interleave as the batch runs; each choice's own sequence is the same.
    def by_choice(events):
        return {i: [c["choices"][0] for c in events if c["choices"][0]["index"] == i] for i in (0, 1)}
    assert by_choice(plain) == by_choice(chunks)


def test_errors_404_405_400_413(shared_server):
    e = expect_error(shared_server, "GET", "/v2/nothing", None, 404)
    assert e["code"] == "not_found"
    status, headers, _ = shared_server.request("GET", "/v1/completions")
    assert status == 405 and headers["Allow"] == "POST"
    status, headers, _ = shared_server.request("POST", "/health", b"{}")
    assert status == 405 and "GET" in headers["Allow"]
    expect_error(shared_server, "POST", "/v1/completions", b"{not json", 400)
    e = expect_error(shared_server, "POST", "/v1/completions", json.dumps({"prompt": "a" * 5000}).encode(), 413)
    assert "4096" in e["message"]


def test_a_deeply_nested_body_is_400_and_the_server_goes_on(serve):
    # 100,000 nested arrays or objects (200-600 KB, under the default --max-body): copying or
    # printing such a value recurses once per level (it crashed the server), so it is refused
    # before parsing, by its depth.
    s = serve("--http", "127.0.0.1:0")
    depth = 100000
    for body in (b'{"prompt": "a", "max_tokens": ' + b"[" * depth + b"]" * depth + b"}",
                 b'{"prompt": "a", "stop": ' + b"{\"a\":" * depth + b"1" + b"}" * depth + b"}"):
        e = expect_error(s, "POST", "/v1/completions", body, 400)
        assert "deeper than 64 levels" in e["message"], e
    e = expect_error(s, "POST", "/v1/chat/completions", b'{"messages": ' + b"[" * depth + b"]" * depth + b"}", 400)
    assert "deeper than 64 levels" in e["message"], e
    assert s.request("GET", "/health")[0] == 200
    assert completion(s, prompt="a", max_tokens=3, seed=1)["choices"][0]["finish_reason"] == "length"


def recv_until(sock, marker):
    """Bytes from sock until `marker` has come (asserting the peer does not close first)."""
    data = b""
    while marker not in data:
        chunk = sock.recv(4096)
        assert chunk, data
        data += chunk
    return data


def read_head(sock):
    """Bytes up to the end of one response head (CRLF CRLF), and whatever came after it."""
    head, _, rest = recv_until(sock, b"\r\n\r\n").partition(b"\r\n\r\n")
    return head, rest


def test_expect_100_continue_is_answered_before_the_body(shared_server):
    # curl (past 1 MiB) and older libcurl (past 1 KiB) send the headers, then wait for
    # "100 Continue" before the body; without it they wait a second. The client here waits up to
    # 10 s, so a server that did not answer fails the test instead of slowing it.
    body = json.dumps({"prompt": "x" * 2000, "max_tokens": 2, "seed": 1}).encode()
    with socket.create_connection(("127.0.0.1", shared_server.port), timeout=10) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Expect: 100-continue\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n")
        head, rest = read_head(sock)
        assert head == b"HTTP/1.1 100 Continue" and rest == b""
        sock.sendall(body)
        head, rest = read_head(sock)
        assert head.startswith(b"HTTP/1.1 200 "), head
    # Past --max-body (4096 here) the answer is 413 at once, and the body is never asked for.
    with socket.create_connection(("127.0.0.1", shared_server.port), timeout=10) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Expect: 100-continue\r\nContent-Length: 5000\r\n\r\n")
        head, _ = read_head(sock)
        assert head.startswith(b"HTTP/1.1 413 "), head


def test_concurrent_requests_equal_their_solo_answers(serve):
    s = serve("--http", "127.0.0.1:0", "--http-batch", "64")
    bodies = [dict(prompt=f"req {i}", max_tokens=60 + 7 * i, temperature=0.9, seed=1000 + i, top_k=50)
              for i in range(64)]
    solo = [completion(s, **b)["choices"][0]["sha256"] for b in bodies]
    results = [None] * len(bodies)

    def worker(i):
        if i % 2:
            events = stream(s, bodies[i])
            results[i] = events[-1]["choices"][0]["sha256"]
        else:
            results[i] = completion(s, **bodies[i])["choices"][0]["sha256"]

    for _ in range(2):
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(bodies))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert results == solo
    text = s.metrics()
    count = int(next(l for l in text.splitlines() if l.startswith("lockstep_batch_size_count")).split()[1])
    total = float(next(l for l in text.splitlines() if l.startswith("lockstep_batch_size_sum")).split()[1])
    assert count > 0 and total >= count


def test_a_request_for_another_model_is_refused(shared_server):
    status, answer = shared_server.post("/v1/completions", {"model": "other", "prompt": "a", "max_tokens": 2})
    assert status == 404 and answer["error"]["code"] == "model_not_found" and answer["error"]["param"] == "model"
    assert "'tiny'" in answer["error"]["message"]
    status, answer = shared_server.post("/v1/chat/completions",
                                        {"model": "other", "messages": [{"role": "user", "content": "a"}]})
    assert status == 404 and answer["error"]["code"] == "model_not_found"
    status, answer = shared_server.post("/v1/completions", {"model": "tiny", "prompt": "a", "max_tokens": 2})
    assert status == 200, answer  # its own name, or none at all, is served


def test_replica_named_in_health_metrics_and_every_header(serve):
    named = serve("--http", "127.0.0.1:0", "--name", "replica-b")
    status, headers, body = named.request("GET", "/health")
    assert status == 200 and json.loads(body)["replica"] == "replica-b"
    assert headers["X-Lockstep-Replica"] == "replica-b"
    for method, path, body in [("GET", "/v1/models", None), ("GET", "/nowhere", None),
                               ("POST", "/v1/completions", {"prompt": "a", "max_tokens": 2, "seed": 1}),
                               ("POST", "/v1/completions", {"prompt": "a", "max_tokens": 2, "stream": True}),
                               ("POST", "/v1/completions", {"max_tokens": "x"})]:
        _, headers, _ = named.request(method, path, body)
        assert headers.get("X-Lockstep-Replica") == "replica-b", (method, path, headers)
    assert 'lockstep_model_info{replica="replica-b",' in named.request("GET", "/metrics")[2].decode()
    # Unnamed: the host name and the HTTP port.
    plain = serve("--http", "127.0.0.1:0")
    health = json.loads(plain.request("GET", "/health")[2])
    assert health["replica"] == f"{socket.gethostname()}:{plain.port}"


def test_metrics(shared_server):
    completion(shared_server, prompt="Hello", max_tokens=5, temperature=0, seed=0)
    status, headers, body = shared_server.request("GET", "/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain; version=0.0.4")
    replica = json.loads(shared_server.request("GET", "/health")[2])["replica"]
    assert headers["X-Lockstep-Replica"] == replica
    samples = [line for line in body.decode().splitlines() if line and not line.startswith("#")]
    label = f'replica="{replica}"'
    assert samples and all(line.split(" ")[0].split("{", 1)[1].startswith(label) for line in samples), samples
    text = body.decode().replace("{" + label + "}", "").replace(label + ",", "")
    for name in ["lockstep_model_info{", "lockstep_http_requests_total{endpoint=\"/v1/completions\",status=\"200\"}",
                 "lockstep_prompt_tokens_total", "lockstep_generation_tokens_total", "lockstep_num_requests_waiting",
                 "lockstep_num_requests_running", "lockstep_batch_size_bucket{le=\"+Inf\"}",
                 "lockstep_time_to_first_token_seconds_bucket", "lockstep_time_per_output_token_seconds_count",
                 "lockstep_prefix_cache_rows_reused_total"]:
        assert name in text, name
    _, _, models = shared_server.request("GET", "/v1/models")
    sha = json.loads(models)["data"][0]["parameters_sha256"]
    assert f'parameters_sha256="{sha}"' in text


def metric(server, name):
    return int(next(l for l in server.metrics().splitlines() if l.startswith(name + " ")).split()[1])


def test_metrics_count_each_generation_by_finish_reason_and_length(shared_server):
    names = ['lockstep_request_success_total{finished_reason="length"}',
             'lockstep_request_success_total{finished_reason="stop"}',
             'lockstep_request_generation_tokens_bucket{le="2"}',
             'lockstep_request_generation_tokens_bucket{le="5"}',
             "lockstep_request_generation_tokens_count", "lockstep_request_generation_tokens_sum"]
    before = [metric(shared_server, n) for n in names]
    completion(shared_server, prompt="lengths", max_tokens=5, n=2, temperature=0.7, seed=4)
    # A stop string that the first generated byte ends: each choice stops after one token.
    first = completion(shared_server, prompt="stops", max_tokens=8, temperature=0, seed=0)["choices"][0]["text"]
    completion(shared_server, prompt="stops", max_tokens=8, temperature=0, seed=0, stop=first[0])
    after = [metric(shared_server, n) for n in names]
    # length: the 2 choices and the first "stops"; stop: the second. Their tokens: 5, 5, 8 and 1.
    assert [a - b for a, b in zip(after, before)] == [3, 1, 1, 3, 4, 5 + 5 + 8 + 1]
    # A success counter counts no failure (issue 42): abort and error are failures.
    text = shared_server.metrics()
    assert not re.search(r'lockstep_request_success_total\{finished_reason="(abort|error)"', text), text
    for reason in ("abort", "error"):
        assert f'lockstep_request_failure_total{{finished_reason="{reason}"}}' in text, text


def test_prefix_cache_serves_prompts_without_changing_a_bit(serve, model):
    """A generation's prompt starts from the longest cached prefix and a finished one is filed:
    a repeated request and a follow-up sharing its prefix reuse rows, and every text equals the
    cold answer, --no-cache's and `lockstep generate`'s, alone and together, past the window too."""
    s = serve("--http", "127.0.0.1:0")
    plain = serve("--http", "127.0.0.1:0", "--no-cache")
    assert s.port and plain.port, s.err() + plain.err()
    reused = "lockstep_prefix_cache_rows_reused_total"
    prompt = "The quick brown fox jum"  # 23 bytes of the 32-byte window; blocks of 16 are filed
    cases = [dict(prompt=prompt, max_tokens=6, temperature=0.8, seed=3),
             dict(prompt=prompt, max_tokens=6, temperature=0.8, seed=3),  # the same again
             dict(prompt=prompt + "ps", max_tokens=5, temperature=0.8, seed=4),  # a follow-up
             dict(prompt=prompt, max_tokens=40, temperature=1.0, seed=5),  # restarts past the window
             dict(prompt=prompt * 2, max_tokens=8, temperature=0.7, seed=6)]  # truncated to the window
    texts = []
    for i, body in enumerate(cases):
        before = metric(s, reused)
        texts.append(completion(s, **body)["choices"][0]["text"])
        if i == 0:
            assert before == 0 and metric(s, reused) == 0  # cold
        if i in (1, 2, 3):
            assert metric(s, reused) >= before + 16, (i, before)
    assert texts[0] == texts[1]
    for body, text in zip(cases, texts):
        assert completion(plain, **body)["choices"][0]["text"] == text
        expected = generate(model, body["prompt"], body["max_tokens"], str(body["temperature"]), body["seed"])
        assert text == expected.decode("utf-8", errors="replace")
    assert metric(plain, reused) == 0
    # Together, streamed and not, warm: the same texts.
    results = [None] * len(cases)

    def worker(i):
        if i % 2:
            events = stream(s, cases[i])
            results[i] = "".join(e["choices"][0]["text"] for e in events)
        else:
            results[i] = completion(s, **cases[i])["choices"][0]["text"]

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(cases))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert results == texts


def wait_for_data(conn):
    recv_until(conn, b"data: ")


def test_disconnect_leaves_the_batch(serve):
    s = serve("--http", "127.0.0.1:0")
    conn = socket.create_connection(("127.0.0.1", s.port), timeout=10)
    body = json.dumps({"prompt": "Hello", "max_tokens": 1000000, "stream": True}).encode()
    conn.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    wait_for_data(conn)
    conn.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if "lockstep_num_requests_running 0" in s.metrics():
            return
        time.sleep(0.05)
    pytest.fail("the disconnected generation still runs")


def test_non_streamed_disconnect_leaves_the_batch(serve):
    s = serve("--http", "127.0.0.1:0")
    conn = socket.create_connection(("127.0.0.1", s.port), timeout=10)
    body = json.dumps({"prompt": "Hello", "max_tokens": 1000000}).encode()
    conn.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    wait_running(s, "1")
    conn.close()
    wait_running(s, "0")


def wait_running(s, value):
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if f"lockstep_num_requests_running {value}\n" in s.metrics():
            return
        time.sleep(0.05)
    pytest.fail(f"lockstep_num_requests_running did not become {value}")


def test_write_timeout_drops_a_client_that_stops_reading(serve):
    s = serve("--http", "127.0.0.1:0", "--write-timeout", "0.5")
    conn = socket.socket()
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    conn.settimeout(10)
    conn.connect(("127.0.0.1", s.port))
    body = json.dumps({"prompt": "Hello", "max_tokens": 1000000, "stream": True, "logprobs": 20}).encode()
    conn.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    # Never read: once the buffers are full a write waits past the timeout and the client is dropped.
    def metric(name):
        return int(next(l for l in s.metrics().splitlines() if l.startswith(name + " ")).split()[1])

    deadline = time.monotonic() + 30
    while metric("lockstep_generation_tokens_total") == 0:  # admitted and generating
        assert time.monotonic() < deadline
        time.sleep(0.05)
    while metric("lockstep_num_requests_running") != 0:
        assert time.monotonic() < deadline, "the stalled client still holds its generation"
        time.sleep(0.1)
    while conn.recv(65536):  # what was written, then the end: the server closed the connection
        assert time.monotonic() < deadline
    conn.close()


def test_a_client_that_stops_reading_pauses_only_its_own_generations(serve, model):
    """Flow control: streams whose clients read nothing (16 choices each, every token's top 20
    logprobs) stop generating once their queued events reach a bound, instead of piling events
    up in memory and in the event loop's queue; /health and /metrics answer at once and another
    client's completion runs as usual, with its usual text."""
    s = serve("--http", "127.0.0.1:0", "--write-timeout", "60")
    stalled = []
    body = json.dumps({"prompt": "Hello", "max_tokens": 1000000, "stream": True, "logprobs": 20, "n": 16}).encode()
    for _ in range(2):
        conn = socket.socket()
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        conn.settimeout(10)
        conn.connect(("127.0.0.1", s.port))
        conn.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        stalled.append(conn)
    deadline = time.monotonic() + 30
    last = -1
    while True:  # until the stalled streams' generations stop
        assert time.monotonic() < deadline, "generations whose clients read nothing kept running"
        began = time.monotonic()
        status, _, _ = s.request("GET", "/health", timeout=10)
        assert status == 200 and time.monotonic() - began < 2, "/health waited behind the streams"
        tokens = metric(s, "lockstep_generation_tokens_total")
        if tokens == last:
            break
        last = tokens
        time.sleep(0.5)
    assert metric(s, "lockstep_num_requests_running") == 32  # paused, in the batch
    began = time.monotonic()
    text = completion(s, prompt="Hi there", max_tokens=12, temperature=0.9, seed=4)["choices"][0]["text"]
    assert time.monotonic() - began < 5
    assert text == generate(model, "Hi there", 12, "0.9", 4).decode("utf-8", errors="replace")
    for conn in stalled:
        conn.close()
    wait_running(s, "0")


def test_the_http_port_opens_before_the_model_loads(serve):
    """The command binds --http before loading and says so on stderr (the port answers 503
    while loading: tests/serve/loading_test.cpp); the server then serves on that same port."""
    s = serve("--http", "127.0.0.1:0")
    assert s.port, s.banner + s.err()
    assert f"lockstep serve: loading {s.model}; http://127.0.0.1:{s.port} answers 503 until it is ready" in s.err()
    status, _, body = s.request("GET", "/health")
    assert status == 200 and json.loads(body)["status"] == "ok"


def test_head_and_streamed_chat(shared_server, model):
    status, headers, body = shared_server.request("HEAD", "/health")
    assert status == 200 and body == b"" and int(headers["Content-Length"]) > 0
    conn = http.client.HTTPConnection("127.0.0.1", shared_server.port, timeout=30)
    conn.request("POST", "/v1/chat/completions", body=json.dumps(
        {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 12, "temperature": 0.7, "seed": 8,
         "stream": True}))
    r = conn.getresponse()
    events = [e[len("data: "):] for e in r.read().decode().split("\n\n") if e]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    expected = generate(model, "user: Hi\nassistant:", 12, "0.7", 8)
    assert text == expected.decode("utf-8", errors="replace")
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


def test_queue_full_is_429(serve):
    s = serve("--http", "127.0.0.1:0", "--http-batch", "1", "--max-queue", "0")
    conn = socket.create_connection(("127.0.0.1", s.port), timeout=10)
    body = json.dumps({"prompt": "Hello", "max_tokens": 1000000, "stream": True}).encode()
    conn.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    wait_for_data(conn)
    e = expect_error(s, "POST", "/v1/completions", json.dumps({"prompt": "a", "max_tokens": 2}).encode(), 429)
    assert e["code"] == "queue_full"
    conn.close()


def test_api_key(serve, tmp_path):
    key = tmp_path / "key"
    key.write_text("s3cret\n")
    key.chmod(0o600)  # a key others may read is refused (test_http_guard.py)
    s = serve("--http", "127.0.0.1:0", "--api-key-file", str(key))
    body = json.dumps({"prompt": "a", "max_tokens": 2}).encode()
    e = expect_error(s, "POST", "/v1/completions", body, 401)
    assert e["code"] == "invalid_api_key"
    expect_error(s, "POST", "/v1/completions", body, 401, headers={"Authorization": "Bearer wrong"})
    expect_error(s, "POST", "/v1/completions", body, 401, headers={"Authorization": "Bearer s3cre"})
    expect_error(s, "POST", "/v1/completions", body, 401, headers={"Authorization": "Basic s3cret"})
    status, _, _ = s.request("POST", "/v1/completions", body, {"Authorization": "Bearer s3cret"})
    assert status == 200
    status, _, _ = s.request("POST", "/v1/completions", body, {"Authorization": "bearer s3cret"})
    assert status == 200  # the scheme in any case
    assert s.request("GET", "/health")[0] == 200
    # The tokenizer endpoints are the API's too.
    expect_error(s, "GET", "/tokenizer_info", None, 401)
    expect_error(s, "POST", "/tokenize", {"prompt": "a"}, 401)
    expect_error(s, "POST", "/detokenize", {"tokens": [97]}, 401)
    assert s.request("POST", "/tokenize", {"prompt": "a"}, {"Authorization": "Bearer s3cret"})[0] == 200


def test_cors_only_for_the_origins_given(serve, tmp_path, shared_server):
    key = tmp_path / "key"
    key.write_text("s3cret\n")
    key.chmod(0o600)
    app = "http://app.example:3000"
    s = serve("--http", "127.0.0.1:0", "--api-key-file", str(key), "--cors-origin", app)
    asked = "authorization, content-type, x-stainless-lang"
    preflight = {"Origin": app, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": asked}
    # The preflight carries no credentials and is answered before the key is checked.
    status, headers, body = s.request("OPTIONS", "/v1/completions", None, preflight)
    assert status == 204 and body == b""
    assert headers["Access-Control-Allow-Origin"] == app and headers["Access-Control-Allow-Headers"] == asked
    assert "POST" in headers["Access-Control-Allow-Methods"] and "Content-Length" not in headers
    body = json.dumps({"prompt": "a", "max_tokens": 2}).encode()
    auth = {"Authorization": "Bearer s3cret"}
    status, headers, _ = s.request("POST", "/v1/completions", body, {**auth, "Origin": app})
    assert status == 200 and headers["Access-Control-Allow-Origin"] == app
    assert "X-Lockstep-Replica" in headers["Access-Control-Expose-Headers"]
    status, headers, _ = s.request("POST", "/v1/completions", body, {"Origin": app})  # the page can read its 401
    assert status == 401 and headers["Access-Control-Allow-Origin"] == app
    conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=30)
    conn.request("POST", "/v1/completions", body=json.dumps({"prompt": "a", "max_tokens": 2, "stream": True}),
                 headers={**auth, "Origin": app})
    r = conn.getresponse()
    assert r.status == 200 and r.getheader("Access-Control-Allow-Origin") == app
    r.read()
    conn.close()
    # Another origin, or a server without --cors-origin: refused (a cross-site request, 403), with
    # no CORS header, so the page cannot even read why; and no preflight.
    status, headers, _ = s.request("POST", "/v1/completions", body, {**auth, "Origin": "http://evil.example"})
    assert status == 403 and "Access-Control-Allow-Origin" not in headers
    status, headers, _ = s.request("OPTIONS", "/v1/completions", None, {**preflight, "Origin": "http://evil.example"})
    assert status == 403 and "Access-Control-Allow-Origin" not in headers
    status, headers, _ = shared_server.request("OPTIONS", "/v1/completions", None, preflight)
    assert status == 403 and "Access-Control-Allow-Origin" not in headers
    any_origin = serve("--http", "127.0.0.1:0", "--cors-origin", "*")
    status, headers, _ = any_origin.request("GET", "/v1/models", None, {"Origin": "http://x.example"})
    assert status == 200 and headers["Access-Control-Allow-Origin"] == "*"


def test_a_bad_cors_origin_is_refused(model):
    for origin in ["app.example", "http://app.example/", "ftp://x", "http://"]:
        r = run("serve", model, "--http", "127.0.0.1:0", "--cors-origin", origin)
        assert r.returncode == 1 and b"--cors-origin must be * or an origin" in r.stderr, r.stderr


def test_read_timeout_closes_a_silent_client(serve):
    s = serve("--http", "127.0.0.1:0", "--read-timeout", "0.5")
    conn = socket.create_connection(("127.0.0.1", s.port), timeout=10)
    conn.sendall(b"POST /v1/completions HTTP/1.1\r\nContent-Length: 100\r\n\r\n{")
    start = time.monotonic()
    assert conn.recv(100) == b""  # closed, nothing answered
    assert time.monotonic() - start < 5
    conn.close()


def test_drain_on_sigterm(serve):
    s = serve("--http", "127.0.0.1:0", "--drain-seconds", "1")
    conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=20)
    conn.request("POST", "/v1/completions",
                 body=json.dumps({"prompt": "Hello", "max_tokens": 1000000, "stream": True}))
    r = conn.getresponse()
    assert r.status == 200
    assert r.read(6) == b"data: "
    s.proc.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    status, _, body = s.request("GET", "/health", timeout=5)
    assert status == 503 and json.loads(body)["status"] == "draining"
    e = expect_error(s, "POST", "/v1/completions", json.dumps({"prompt": "a"}).encode(), 503)
    assert e["code"] == "draining"
    rest = "data: " + r.read().decode()
    assert '"finish_reason":"abort"' in rest and rest.endswith("data: [DONE]\n\n")
    assert s.proc.wait(10) == 128 + signal.SIGTERM


def test_drain_lets_short_generations_finish(serve, model):
    s = serve("--http", "127.0.0.1:0", "--drain-seconds", "30")
    conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=20)
    conn.request("POST", "/v1/completions",
                 body=json.dumps({"prompt": "Hello", "max_tokens": 3000, "temperature": 0.5, "seed": 3, "stream": True}))
    r = conn.getresponse()
    assert r.read(6) == b"data: "
    s.proc.send_signal(signal.SIGTERM)
    rest = "data: " + r.read().decode()
    assert '"finish_reason":"length"' in rest
    assert s.proc.wait(20) == 128 + signal.SIGTERM


def test_chat_without_max_tokens_runs_to_the_end_of_the_window(serve, tmp_path):
    path = str(tmp_path / "w64")
    assert run("init", "--seed", "3", "--d-model", "16", "--n-layers", "1", "--n-heads", "2", "--d-ff", "32",
               "--length", "64", "-o", path).returncode == 0
    from conftest import Server
    s = Server(path, ["--http", "127.0.0.1:0"], tmp_path)
    try:
        hi = {"messages": [{"role": "user", "content": "Hi"}], "seed": 1}  # "user: Hi\nassistant:", 19 bytes
        status, a = s.post("/v1/chat/completions", hi)
        assert status == 200 and a["usage"] == {"prompt_tokens": 19, "completion_tokens": 45, "total_tokens": 64}
        status, a = s.post("/v1/chat/completions", {**hi, "stream": False, "max_completion_tokens": 3})
        assert status == 200 and a["usage"]["completion_tokens"] == 3
        long = {"messages": [{"role": "user", "content": "x" * 50}], "seed": 1}  # 67 bytes: past the window
        status, a = s.post("/v1/chat/completions", long)
        assert status == 200 and a["usage"]["completion_tokens"] == 16
        status, a = s.post("/v1/completions", {"prompt": "Hi", "seed": 1})  # completions keep OpenAI's 16
        assert status == 200 and a["usage"]["completion_tokens"] == 16
    finally:
        s.stop(signal.SIGKILL)


def test_chat_completion(shared_server, model):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    status, a = shared_server.post("/v1/chat/completions",
                                   {"messages": messages, "max_tokens": 10, "temperature": 0.7, "seed": 8})
    assert status == 200, a
    assert a["object"] == "chat.completion"
    prompt = "system: Be brief.\nuser: Hi\nassistant:"
    expected = generate(model, prompt, 10, "0.7", 8)
    assert a["choices"][0]["message"] == {"role": "assistant", "content": expected.decode("utf-8", errors="replace")}
    expect_error(shared_server, "POST", "/v1/chat/completions", json.dumps({"messages": []}).encode(), 400, "messages")
    expect_error(shared_server, "POST", "/v1/chat/completions",
                 json.dumps({"messages": [{"role": "robot", "content": "x"}]}).encode(), 400, "messages[0].role")


# --listen: the frame protocol over TCP, the same model and batcher as the Unix socket.
def test_listen_tcp_serves_the_frame_protocol(serve, tmp_path):
    sock_path = str(tmp_path / "s.sock")
    s = serve("--socket", sock_path, "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0")
    assert s.tcp_port and s.port, s.banner + s.err()
    assert sock_path in s.banner
    answers = []
    for family, address in [(socket.AF_INET, ("127.0.0.1", s.tcp_port)), (socket.AF_UNIX, sock_path)]:
        c = socket.socket(family, socket.SOCK_STREAM)
        c.settimeout(10)
        c.connect(address)
        hs = json.loads(read_frame(c))
        assert hs["inputs"][0]["shape"] == [1, 32]
        payload = struct.pack("<32i", *range(65, 97))
        c.sendall(struct.pack("<Q", len(payload)) + payload)
        answer = read_frame(c)
        assert answer[0] == 0
        answers.append(answer)
        c.close()
    assert answers[0] == answers[1]
    assert s.request("GET", "/health")[0] == 200


@pytest.mark.parametrize("args,message", [
    (["--listen", "0.0.0.0:0"], "--listen-any"),
    (["--http", "0.0.0.0:0"], "--listen-any"),
    (["--http", "example.com:80"], "numeric"),
    (["--http", "127.0.0.1:99999"], "port"),
    (["--http", "127.0.0.1"], "HOST:PORT"),
    ([], "--socket"),
])
def test_listen_refusals(model, args, message):
    r = run("serve", model, *args, timeout=30)
    assert r.returncode != 0
    assert message in r.stderr.decode(), r.stderr


def test_help_says_why_loopback():
    r = run("serve", "--help")
    assert b"--listen-any" in r.stdout and b"authentication" in r.stdout


@pytest.mark.parametrize("body,where", [(b'{"prompt": "a",', "byte 16"), (b"{x}", "byte 2"),
                                        (b"", "byte 1"), (b'{"prompt": "\xff"}', "byte 13")])
def test_a_body_that_is_not_json_says_where_without_the_parsers_internals(shared_server, body, where):
    """The 400 said '[json.exception.parse_error.101] parse error at ...', nlohmann's own tag
    (issue 42); it says the byte, line and column and what the parser expected."""
    status, _, data = shared_server.request("POST", "/v1/completions", body)
    assert status == 400, data
    message = json.loads(data)["error"]["message"]
    assert message.startswith("the body is not valid JSON (" + where + ", line 1, column "), message
    assert "json.exception" not in message and "parse_error" not in message, message


def test_a_number_past_doubles_range_is_400_without_the_parsers_internals(shared_server):
    """1e999 is valid JSON that nlohmann cannot hold (out_of_range, not parse_error): a 400 too,
    never a 500 (the completion parser's fuzz target found it)."""
    for body in (b'{"prompt": "a", "max_tokens": 1e999}', b'{"prompt": "a", "max_tokens": 1e999'):
        status, _, data = shared_server.request("POST", "/v1/completions", body)
        assert status == 400, data
        message = json.loads(data)["error"]["message"]
        assert message.startswith("the body is not valid JSON"), message
        assert "json.exception" not in message, message


def test_the_start_and_stop_lines_say_what_listens_and_count_http(serve, tmp_path):
    """With --http alone the start line printed the frame protocol's `up to 1 call a run` and
    its tensors, and the stop line `0 calls in 0 runs` after any number of HTTP tokens (issue
    42): the start line says which protocol each address speaks, the tensors come only with a
    frame endpoint, and the stop line counts HTTP requests, generations and tokens."""
    s = serve("--http", "127.0.0.1:0")
    assert s.banner == f"serving {s.model} on http://127.0.0.1:{s.port} (HTTP, the OpenAI API: up to 64 generations a step)", s.banner
    for seed in (1, 2):
        status, _ = s.post("/v1/completions", dict(prompt="The ", max_tokens=5, n=2, seed=seed))
        assert status == 200
    assert s.stop() == 128 + signal.SIGTERM
    lines = s.out().splitlines()
    assert len(lines) == 2 and "inputs" not in s.out(), s.out()
    assert lines[-1] == ("lockstep serve: stopped by SIGTERM, 0 calls in 0 runs, 0 rows computed, 0 rows reused; "
                         "2 HTTP requests, 4 generations of 20 tokens"), lines[-1]
    sock = str(tmp_path / "s.sock")
    both = serve("--http", "127.0.0.1:0", "--socket", sock, "--batch", "4")
    assert f"{sock} (frames: up to 4 calls a run)" in both.banner, both.banner
    assert "(HTTP, the OpenAI API: up to 64 generations a step)" in both.banner, both.banner
    assert "inputs" in both.out(), both.out()
    both.stop()
