"""`torchtpu_compile.serve` answered by a real HTTP client (the standard library's urllib) on
loopback: completions equal eager's tokens for each prompt alone, also when the requests come
at once and share the slots, streamed or whole; the model's EOS ends a request; bad requests
get 4xx in the API's words, an over-long body too;
the in-flight bound answers 429; a SIGTERM lets the request in flight finish; `--admin`
swaps the weights of a running server for another checkpoint's."""

import json
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

import torchtpu_compile as ttc

MODELS = Path(__file__).resolve().parents[2] / "testdata" / "models"
ROWS = MODELS / "decoder_rows"
TOKENIZER = MODELS.parent / "tokenizer"


def requests_and_tokens():
    """decoder_rows' 7 prompts (padded with -1) and the 16 tokens eager decodes for each alone."""
    prompts = np.load(ROWS / "prompts.npy")
    return [[int(t) for t in row if t >= 0] for row in prompts], np.load(ROWS / "tokens.npy").tolist()


class Server:
    """`torchtpu_compile.serve(...)` in a child process; its base URL once it listens."""

    def __init__(self, artifact: Path, *extra: str):
        args = ", ".join([repr(str(artifact)), "port=0", *extra])
        code = f"import torchtpu_compile as t; t.serve({args})"
        self.proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        assert line.startswith("serving"), line
        self.url = line.split(" at ")[1].split(" ")[0]

    def post(self, body, path="/v1/completions"):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def get(self, path):
        with urllib.request.urlopen(self.url + path, timeout=60) as r:
            return r.status, r.read().decode()

    def stop(self) -> str:
        self.proc.send_signal(signal.SIGTERM)
        out, _ = self.proc.communicate(timeout=60)
        assert self.proc.returncode == 0, out
        return out


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    path = tmp_path_factory.mktemp("serve") / "decoder_rows.tpuexe"
    ttc.compile(MODELS / "decoder_rows.pt2", path, targets=["cpu"], quiet=True)
    return path


def chunks(body: str):
    """The JSON chunks of a server-sent event stream, and whether it ended with [DONE]."""
    data = [line[len("data: "):] for line in body.splitlines() if line.startswith("data: ")]
    return [json.loads(d) for d in data if d != "[DONE]"], data[-1:] == ["[DONE]"]


def test_concurrent_requests_get_their_solo_tokens(rows):
    prompts, eager = requests_and_tokens()
    server = Server(rows)
    try:
        status, body = server.get("/health")
        assert status == 200 and json.loads(body)["slots"] == 4
        results = [None] * (3 * len(prompts))

        def ask(i):
            p = prompts[i % len(prompts)]
            body = {"model": "decoder_rows", "prompt": p, "max_tokens": 16, "temperature": 0}
            results[i] = server.post(body)

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(results))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for i, (status, body) in enumerate(results):
            assert status == 200, body
            c = json.loads(body)
            choice = c["choices"][0]
            assert choice["token_ids"] == eager[i % len(prompts)], i
            assert choice["text"] == " ".join(map(str, eager[i % len(prompts)]))
            assert choice["finish_reason"] == "length" and c["object"] == "text_completion"
            assert c["usage"] == {"prompt_tokens": len(prompts[i % 7]), "completion_tokens": 16,
                                  "total_tokens": len(prompts[i % 7]) + 16}
        # Streamed: a chunk per token, then the finish reason, then [DONE].
        status, body = server.post({"prompt": prompts[2], "max_tokens": 16, "temperature": 0, "stream": True})
        parts, done = chunks(body)
        assert status == 200 and done
        assert [t for p in parts for t in p["choices"][0]["token_ids"]] == eager[2]
        assert "".join(p["choices"][0]["text"] for p in parts) == " ".join(map(str, eager[2]))
        assert parts[-1]["choices"][0]["finish_reason"] == "length"
        # A stop token ends the request there, kept.
        stop = eager[0][3]
        status, body = server.post({"prompt": prompts[0], "temperature": 0, "stop_token_ids": [stop]})
        choice = json.loads(body)["choices"][0]
        assert choice["token_ids"] == eager[0][:4] and choice["finish_reason"] == "stop"
        status, metrics = server.get("/metrics")
        assert 'torchtpu_requests_total{outcome="completed"} 23' in metrics
        assert "torchtpu_generated_tokens_total 356" in metrics and "torchtpu_slots 4" in metrics
        value = {l.split()[0]: float(l.split()[1]) for l in metrics.splitlines() if not l.startswith("#")}
        # The steps' time holds their calls' time: the host's share is what is left.
        assert 0 < value["torchtpu_step_call_seconds_total"] <= value["torchtpu_step_seconds_total"], metrics
    finally:
        out = server.stop()
    assert "23 requests completed" in out


def test_text_in_and_out_through_a_tokenizer(rows):
    """With `tokenizer=`, a text prompt is its ids (as Hugging Face's `tokenizers` encodes it),
    and a completion's text is its tokens decoded after the prompt (as that library decodes
    them: testdata/tokenizer/cases.json), whole or streamed."""
    cases = json.loads((TOKENIZER / "cases.json").read_text())
    server = Server(rows, f"tokenizer={str(TOKENIZER / 'tokenizer.json')!r}")
    try:
        text, ids = cases["encode"][0]["text"], cases["encode"][0]["ids"]
        by_text = json.loads(server.post({"prompt": text, "max_tokens": 8, "temperature": 0})[1])
        by_ids = json.loads(server.post({"prompt": ids, "max_tokens": 8, "temperature": 0})[1])
        assert by_text["usage"]["prompt_tokens"] == len(ids)
        assert by_text["choices"][0] == by_ids["choices"][0]
        for case in cases["continuations"]:
            body = {"prompt": case["prompt"], "max_tokens": 16, "temperature": 0}
            choice = json.loads(server.post(body)[1])["choices"][0]
            assert choice["token_ids"] == case["tokens"] and choice["text"] == case["text"], case
            parts, done = chunks(server.post({**body, "stream": True})[1])
            assert done and "".join(p["choices"][0]["text"] for p in parts) == case["text"]
        # A stop string ends the text before it, whole or streamed; the request is complete.
        case = cases["continuations"][0]
        stop = case["text"][4:7]
        cut = case["text"][: case["text"].index(stop)]
        body = {"prompt": case["prompt"], "max_tokens": 16, "temperature": 0, "stop": [stop, "never seen"]}
        choice = json.loads(server.post(body)[1])["choices"][0]
        assert choice["text"] == cut and choice["finish_reason"] == "stop", choice
        assert 0 < len(choice["token_ids"]) < 16 and choice["token_ids"] == case["tokens"][: len(choice["token_ids"])]
        parts, done = chunks(server.post({**body, "stream": True})[1])
        assert done and "".join(p["choices"][0]["text"] for p in parts) == cut
        assert parts[-1]["choices"][0]["finish_reason"] == "stop"
        # The scheduler frees a stopped request's slot at its next call, after the answer:
        # wait for it to count it.
        deadline = time.monotonic() + 30
        while True:
            metrics = server.get("/metrics")[1]
            if 'outcome="completed"} 18' in metrics or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert 'torchtpu_requests_total{outcome="completed"} 18' in metrics, metrics
        assert 'torchtpu_requests_total{outcome="cancelled"} 0' in metrics, metrics
    finally:
        server.stop()


def test_chat_goes_through_the_chat_template(rows):
    """`/v1/chat/completions`: a conversation is the prompt transformers' `apply_chat_template`
    renders (testdata/tokenizer/cases.json), tokenized without special tokens; the answer is the
    completion of those ids, as a chat message, whole or streamed as deltas."""
    case = json.loads((TOKENIZER / "cases.json").read_text())["chat"][1]
    server = Server(rows, f"tokenizer={str(TOKENIZER / 'tokenizer.json')!r}",
                    f"chat_template={str(TOKENIZER / 'tokenizer_config.json')!r}")
    try:
        body = {"messages": case["messages"], "max_completion_tokens": 8, "temperature": 0}
        status, answer = server.post(body, "/v1/chat/completions")
        assert status == 200, answer
        chat = json.loads(answer)
        plain = json.loads(server.post({"prompt": case["ids"], "max_tokens": 8, "temperature": 0})[1])
        assert chat["object"] == "chat.completion" and chat["usage"] == plain["usage"]
        assert chat["usage"]["prompt_tokens"] == len(case["ids"])
        message = chat["choices"][0]["message"]
        assert message == {"role": "assistant", "content": plain["choices"][0]["text"]}
        # Both stop at the template's EOS token, `▁do`, unless asked to go on.
        assert chat["choices"][0]["finish_reason"] == plain["choices"][0]["finish_reason"]
        on = json.loads(server.post({**body, "ignore_eos": True}, "/v1/chat/completions")[1])
        assert on["usage"]["completion_tokens"] == 8 and on["choices"][0]["finish_reason"] == "length"
        assert on["choices"][0]["message"]["content"].startswith(message["content"])
        parts, done = chunks(server.post({**body, "stream": True}, "/v1/chat/completions")[1])
        assert done and all(p["object"] == "chat.completion.chunk" for p in parts)
        assert [p["choices"][0]["delta"].get("role") for p in parts] == ["assistant"] + [None] * (len(parts) - 1)
        assert "".join(p["choices"][0]["delta"]["content"] for p in parts) == message["content"]
        for bad, words in [({"max_tokens": 2}, "`messages` is missing"),
                           ({"messages": [{"role": "robot", "content": "x"}]}, "unknown role robot"),
                           ({"messages": case["messages"], "prompt": [1]}, "unknown field `prompt`")]:
            status, answer = server.post(bad, "/v1/chat/completions")
            assert status == 400 and words in answer, answer
    finally:
        server.stop()


def test_requests_stop_at_the_models_eos_unless_asked_to_go_on(rows, tmp_path):
    """The `eos_token_id` of a `generation_config.json` (here beside the tokenizer, as in a
    Hugging Face model folder) ends every request, kept as its last token, unless the request
    asks `ignore_eos`."""
    prompts, eager = requests_and_tokens()
    eos = eager[0][5]
    cut = eager[0].index(eos) + 1
    tokenizer = tmp_path / "tokenizer.json"
    tokenizer.write_bytes((TOKENIZER / "tokenizer.json").read_bytes())
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [eos]}))
    server = Server(rows, f"tokenizer={str(tokenizer)!r}")
    try:
        body = {"prompt": prompts[0], "max_tokens": 16, "temperature": 0}
        choice = json.loads(server.post(body)[1])["choices"][0]
        assert choice["token_ids"] == eager[0][:cut] and choice["finish_reason"] == "stop", choice
        parts, done = chunks(server.post({**body, "stream": True})[1])
        assert done and [t for p in parts for t in p["choices"][0]["token_ids"]] == eager[0][:cut]
        choice = json.loads(server.post({**body, "ignore_eos": True})[1])["choices"][0]
        assert choice["token_ids"] == eager[0] and choice["finish_reason"] == "length", choice
    finally:
        server.stop()


def test_an_artifact_keeps_the_files_serve_reads(tmp_path):
    """`compile(tokenizer=DIR)` stores the folder's tokenizer, chat template and generation config
    in the artifact: `serve` with nothing beside it takes text, chats through the template, and
    stops at the config's EOS; a file named to `serve` overrides its stored namesake."""
    prompts, eager = requests_and_tokens()
    eos = eager[0][5]
    cut = eager[0].index(eos) + 1
    # The template's EOS token, which ends requests too, is not among the tokens asked for here.
    template_eos = json.loads((TOKENIZER / "tokenizer.json").read_text())["model"]["vocab"]["▁do"]
    assert template_eos not in eager[0] + eager[1]
    folder = tmp_path / "model"
    folder.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (folder / name).write_bytes((TOKENIZER / name).read_bytes())
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": eos}))
    art = tmp_path / "rows.tpuexe"
    manifest = ttc.compile(MODELS / "decoder_rows.pt2", art, targets=["cpu"], tokenizer=folder, quiet=True)
    assert [f["name"] for f in manifest["serving"]] == ["tokenizer.json", "tokenizer_config.json",
                                                        "generation_config.json"]
    case = json.loads((TOKENIZER / "cases.json").read_text())["chat"][1]
    chat_body = {"messages": case["messages"], "max_completion_tokens": 8, "temperature": 0, "ignore_eos": True}
    body = {"prompt": prompts[0], "max_tokens": 16, "temperature": 0}
    server = Server(art)
    try:
        choice = json.loads(server.post(body)[1])["choices"][0]
        assert choice["token_ids"] == eager[0][:cut] and choice["finish_reason"] == "stop", choice
        status, answer = server.post(chat_body, "/v1/chat/completions")
        assert status == 200, answer
        stored_chat = json.loads(answer)["choices"][0]["message"]["content"]
        assert json.loads(server.post({"prompt": "hello", "max_tokens": 2})[1])["choices"][0]["text"]
    finally:
        server.stop()
    (tmp_path / "none.json").write_text(json.dumps({"eos_token_id": None}))
    server = Server(art, f"tokenizer={str(TOKENIZER / 'tokenizer.json')!r}",
                    f"chat_template={str(TOKENIZER / 'tokenizer_config.json')!r}",
                    f"generation_config={str(tmp_path / 'none.json')!r}")
    try:
        choice = json.loads(server.post({**body, "prompt": prompts[1]})[1])["choices"][0]
        assert choice["token_ids"] == eager[1] and choice["finish_reason"] == "length", choice
        answer = json.loads(server.post(chat_body, "/v1/chat/completions")[1])
        assert answer["choices"][0]["message"]["content"] == stored_chat
    finally:
        server.stop()


def test_sampling_fields_and_the_usage_chunk(rows):
    """Sampling at temperature 1 restricted to one token (`top_k` 1, a tiny `top_p`, `min_p` 1)
    gives eager's greedy tokens; penalties are taken; `stream_options.include_usage` ends a
    stream with a chunk of the usage alone."""
    prompts, eager = requests_and_tokens()
    server = Server(rows)
    try:
        body = {"prompt": prompts[1], "max_tokens": 16, "temperature": 1.0, "seed": 3}
        for narrow in [{"top_k": 1}, {"top_p": 1e-9}, {"min_p": 1.0}]:
            status, text = server.post({**body, **narrow})
            assert status == 200 and json.loads(text)["choices"][0]["token_ids"] == eager[1], (narrow, text)
        penalized = {**body, "temperature": 0, "presence_penalty": 2, "frequency_penalty": 2, "repetition_penalty": 1.5}
        status, text = server.post(penalized)
        assert status == 200 and len(json.loads(text)["choices"][0]["token_ids"]) == 16, text
        status, text = server.post({**body, "stream": True, "stream_options": {"include_usage": True}})
        parts, done = chunks(text)
        assert status == 200 and done
        assert parts[-1]["choices"] == [] and parts[-1]["usage"]["completion_tokens"] == 16, parts[-1]
        assert all(p["choices"] for p in parts[:-1])
    finally:
        server.stop()


def test_log_probabilities_in_both_apis(rows):
    """`logprobs` (completions: the likeliest count; chat: true with `top_logprobs`) gives each
    token's log probability and the likeliest tokens', likeliest first: a greedy token is the
    likeliest, and every probability is at most 1."""
    case = json.loads((TOKENIZER / "cases.json").read_text())["chat"][1]
    server = Server(rows, f"tokenizer={str(TOKENIZER / 'tokenizer.json')!r}",
                    f"chat_template={str(TOKENIZER / 'tokenizer_config.json')!r}")
    try:
        body = {"prompt": case["ids"], "max_tokens": 6, "temperature": 0, "ignore_eos": True, "logprobs": 3}
        choice = json.loads(server.post(body)[1])["choices"][0]
        lp = choice["logprobs"]
        assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == 6, lp
        for chosen, top in zip(lp["token_logprobs"], lp["top_logprobs"]):
            assert len(top) <= 3 and chosen <= 0 and abs(chosen - max(top.values())) < 1e-6, (chosen, top)
        assert lp["text_offset"] == sorted(lp["text_offset"]) and lp["text_offset"][0] == 0
        parts, done = chunks(server.post({**body, "stream": True})[1])
        streamed = [p["choices"][0]["logprobs"]["token_logprobs"] for p in parts if p["choices"][0]["token_ids"]]
        assert done and sum(streamed, []) == lp["token_logprobs"]
        chat = {"messages": case["messages"], "max_tokens": 6, "temperature": 0, "ignore_eos": True,
                "logprobs": True, "top_logprobs": 2}
        content = json.loads(server.post(chat, "/v1/chat/completions")[1])["choices"][0]["logprobs"]["content"]
        assert [c["logprob"] for c in content] == lp["token_logprobs"], content
        for c in content:
            assert len(c["top_logprobs"]) == 2 and c["top_logprobs"][0]["logprob"] == c["logprob"]
            assert bytes(c["bytes"]).decode() == c["token"]
        status, text = server.post({**chat, "logprobs": False}, "/v1/chat/completions")
        assert status == 400 and "`top_logprobs` needs" in text, text
    finally:
        server.stop()


def test_several_choices_each_as_their_own_request(rows):
    """`n` choices are `n` requests of the same prompt, choice `i` seeded `seed + i`: whole or
    streamed (each chunk naming its choice), each equals that request alone."""
    prompts, eager = requests_and_tokens()
    server = Server(rows)
    try:
        greedy = {"prompt": prompts[3], "max_tokens": 16, "temperature": 0, "n": 3}
        answer = json.loads(server.post(greedy)[1])
        assert [c["index"] for c in answer["choices"]] == [0, 1, 2]
        assert all(c["token_ids"] == eager[3] for c in answer["choices"]), answer
        assert answer["usage"]["completion_tokens"] == 48
        sampled = {"prompt": prompts[3], "max_tokens": 16, "temperature": 1.0, "seed": 5}
        alone = [json.loads(server.post({**sampled, "seed": 5 + i})[1])["choices"][0]["token_ids"] for i in range(2)]
        both = json.loads(server.post({**sampled, "n": 2})[1])["choices"]
        assert [c["token_ids"] for c in both] == alone, (both, alone)
        streamed = {**sampled, "n": 2, "stream": True, "stream_options": {"include_usage": True}}
        parts, done = chunks(server.post(streamed)[1])
        by_index = {0: [], 1: []}
        for p in parts[:-1]:
            assert len(p["choices"]) == 1
            by_index[p["choices"][0]["index"]] += p["choices"][0]["token_ids"]
        assert done and [by_index[0], by_index[1]] == alone
        assert parts[-1]["choices"] == [] and parts[-1]["usage"]["completion_tokens"] == 32
        status, text = server.post({**greedy, "n": 17})
        assert status == 400 and "`n` must be from 1 to 16" in text, text
    finally:
        server.stop()


def test_a_body_over_the_limit_gets_413_in_the_apis_shape(rows):
    server = Server(rows, "max_body_bytes=4096")
    try:
        status, text = server.post({"prompt": [1] * 2000})
        error = json.loads(text)["error"]
        assert status == 413 and error["type"] == "invalid_request_error", text
        assert "the body is over 4096 bytes" in error["message"] and "--max-body-bytes" in error["message"]
        assert server.post({"prompt": [1] * 10, "max_tokens": 2})[0] == 200
        assert 'torchtpu_requests_total{outcome="invalid"} 1' in server.get("/metrics")[1]
    finally:
        server.stop()


def test_bad_requests_are_refused_in_the_apis_words(rows):
    server = Server(rows)
    try:
        for body, message in [
            ({"prompt": [1], "echo": True}, "`echo` (the prompt in the answer) is not supported"),
            ({"prompt": [1], "logit_bias": {}}, "unknown field `logit_bias`"),
            ({"prompt": "hello"}, "needs a tokenizer"),
            ({"prompt": [1], "max_tokens": "many"}, "`max_tokens` must be a positive integer"),
            ({"prompt": list(range(60)), "max_tokens": 10}, "need 70 positions; the caches hold 64"),
            ({"prompt": [64]}, "the vocabulary has ids 0 to 63"),
            ({"prompt": [1], "model": "gpt-4"}, "is not served here"),
            (b"{not json", "the body is not JSON"),
        ]:
            status, text = server.post(body)
            assert status == 400, text
            error = json.loads(text)["error"]
            assert message in error["message"] and error["type"] == "invalid_request_error", text
        status, text = server.post({"messages": []}, path="/v1/chat/completions")
        assert status == 400 and "chat needs a chat template" in text, text
        status, text = server.post({}, path="/v1/embeddings")
        assert status == 404
        # The server still answers.
        status, _ = server.post({"prompt": [5], "max_tokens": 2})
        assert status == 200
        metrics = server.get("/metrics")[1]
        assert 'torchtpu_requests_total{outcome="invalid"} 9' in metrics, metrics
    finally:
        server.stop()


def test_requests_beyond_the_bound_get_429_and_none_is_lost(rows):
    prompts, eager = requests_and_tokens()
    server = Server(rows, "max_waiting=0")
    try:
        results = [None] * 32

        def ask(i):
            results[i] = server.post({"prompt": prompts[i % 7], "max_tokens": 16, "temperature": 0})

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(results))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        codes = [status for status, _ in results]
        assert set(codes) <= {200, 429} and 429 in codes, codes
        for i, (status, body) in enumerate(results):
            if status == 200:
                assert json.loads(body)["choices"][0]["token_ids"] == eager[i % 7]
            else:
                assert json.loads(body)["error"]["type"] == "overloaded"
        metrics = server.get("/metrics")[1]
        assert f'torchtpu_requests_total{{outcome="completed"}} {codes.count(200)}' in metrics
        assert f'torchtpu_requests_total{{outcome="rejected"}} {codes.count(429)}' in metrics
    finally:
        server.stop()


def test_a_shutdown_lets_the_request_in_flight_finish(rows):
    server = Server(rows)
    req = urllib.request.Request(server.url + "/v1/completions",
                                 data=json.dumps({"prompt": [5], "max_tokens": 60, "stream": True}).encode())
    with urllib.request.urlopen(req, timeout=60) as stream:
        first = stream.readline()
        assert first.startswith(b"data: ")
        server.proc.send_signal(signal.SIGTERM)
        rest = stream.read().decode()
    parts, done = chunks(first.decode() + rest)
    assert done and len([p for p in parts if p["choices"][0]["token_ids"]]) == 60
    out, _ = server.proc.communicate(timeout=60)
    assert server.proc.returncode == 0 and "1 requests completed" in out, out
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(server.url + "/health", timeout=5)


def halved(src: Path, dst: Path) -> Path:
    """A copy of the archive at `src` with every f32 weight halved: another checkpoint of the
    same program."""
    import zipfile

    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            data = zin.read(info)
            if "/data/weights/weight_" in info.filename:
                data = (np.frombuffer(data, np.float32) * 0.5).astype(np.float32).tobytes()
            zout.writestr(info.filename, data)
    return dst


def test_a_running_server_swaps_its_weights(rows, tmp_path):
    other = halved(MODELS / "decoder_rows.pt2", tmp_path / "halved.pt2")
    prompts, eager = requests_and_tokens()
    ask = {"prompt": prompts[0], "max_tokens": 16, "temperature": 0}
    server = Server(rows, "admin=True")
    try:
        assert json.loads(server.post(ask)[1])["choices"][0]["token_ids"] == eager[0]
        status, text = server.post({"checkpoint": str(other)}, path="/admin/weights")
        assert status == 200 and json.loads(text)["status"] == "swapped", text
        swapped = json.loads(server.post(ask)[1])["choices"][0]["token_ids"]
        assert swapped != eager[0]
        status, text = server.post({"checkpoint": str(MODELS / "decoder_kv.pt2")}, path="/admin/weights")
        assert status == 400 and "is not a checkpoint of this artifact" in text, text
        assert json.loads(server.post(ask)[1])["choices"][0]["token_ids"] == swapped
    finally:
        server.stop()
    # The same as a server started with that checkpoint; without --admin there is no such route.
    started = Server(rows, f"checkpoint={str(other)!r}")
    try:
        assert json.loads(started.post(ask)[1])["choices"][0]["token_ids"] == swapped
        assert started.post({"checkpoint": str(other)}, path="/admin/weights")[0] == 404
    finally:
        started.stop()


def test_an_encoder_decoder_model_is_served(tmp_path):
    """T5 as transformers' seq2seq recipe exports it, served with its encoder: concurrent
    requests, each encoded once and decoded in turn, get transformers' `generate` tokens."""
    t5 = MODELS / "t5_gen_decoder"
    encoder, decoder = tmp_path / "encoder.tpuexe", tmp_path / "decoder.tpuexe"
    ttc.compile(MODELS / "t5_gen_encoder.pt2", encoder, targets=["cpu"], quiet=True)
    ttc.compile(MODELS / "t5_gen_decoder.pt2", decoder, targets=["cpu"], quiet=True)
    cases = [(np.load(t5 / f"prompt{s}.npy").ravel().tolist(), np.load(t5 / f"tokens{s}.npy").ravel().tolist())
             for s in ("", "_short")] * 2
    server = Server(decoder, f"encoder={str(encoder)!r}", "start_token=0")
    try:
        status, body = server.get("/health")
        assert status == 200 and json.loads(body)["slots"] == 1
        results = [None] * len(cases)

        def ask(i):
            results[i] = server.post({"prompt": cases[i][0], "max_tokens": 12, "temperature": 0})

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(cases))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for (status, body), (_, tokens) in zip(results, cases):
            assert status == 200, body
            assert json.loads(body)["choices"][0]["token_ids"] == tokens
        status, body = server.post({"prompt": cases[0][0], "max_tokens": 40})
        assert status == 400 and "the decoder's caches hold 32" in body, body
    finally:
        out = server.stop()
    assert "4 requests completed" in out
