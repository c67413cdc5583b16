"""Sessions and generate() from Python: the session's logits equal the full logits() at every
position (bit for bit), on both paths; generate() is reproducible from its seed on any path."""
import numpy as np
import pytest

lockstep = pytest.importorskip("lockstep")
if getattr(lockstep, "extension_error", None) is not None and not hasattr(lockstep, "LanguageModelInference"):
    pytest.skip("the compiled module is not built", allow_module_level=True)


def tiny():
    shape = lockstep.LanguageModelConfig(length=24, d_model=16, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=20)
    rng = np.random.default_rng(3)
    params = (rng.standard_normal(shape.n_total) * 0.3).astype(np.float32)
    return lockstep.LanguageModelInference(params, shape=shape)


def test_session_logits_equal_the_full_pass_at_every_position():
    lm = tiny()
    text = np.frombuffer(b"sessions keep their bits!", dtype=np.uint8).astype(np.int32)[:24]
    for threaded in (True, False):
        s = lm.session(threaded=threaded, threads=2 if threaded else None)
        pos = 0
        for chunk in (3, 1, 5, 1, 1, 4):
            got = s.append(text[pos : pos + chunk])
            pos += chunk
            full = lm.logits(text[None, :pos], threaded=False)[0, -1]
            assert got.tobytes() == full.tobytes()
        assert s.length == pos and len(s) == pos
        fork = s.fork(5)
        assert fork.length == 5 and fork.tokens == list(text[:5])
        assert fork.append(b"z").tobytes() == lm.logits(np.append(text[:5], ord("z"))[None, :], threaded=False)[0, -1].tobytes()
        s.truncate(2)
        assert s.length == 2


def test_session_refuses_bad_tokens_and_a_full_window():
    lm = tiny()
    s = lm.session()
    s.append(b"ab")
    with pytest.raises(ValueError):
        s.append([1, 999])
    assert s.length == 2
    with pytest.raises(ValueError):
        s.append(b"x" * 30)
    with pytest.raises(TypeError):
        s.append(1.5)


def test_generate_is_reproducible_on_every_path():
    lm = tiny()
    outs = {
        lm.generate(b"hi", 12, temperature=1.2, top_k=40, top_p=0.9, seed=5, threaded=t, threads=n, output="bytes")
        for t, n in ((True, 1), (True, 2), (True, 3), (False, None))
    }
    assert len(outs) == 1 and len(next(iter(outs))) == 12
    greedy = lm.generate("hi", 6, output="bytes")
    ids = [ord("h"), ord("i")]
    for _ in range(6):
        ids.append(lm.next_bytes(np.array([ids], dtype=np.int32))[0])
    assert greedy == bytes(ids[2:])
    seen = []
    lm.generate(b"hi", 4, on_token=seen.append)
    assert len(seen) == 4
    with pytest.raises(ValueError):
        lm.generate(b"hi", 4, temperature=-1.0)
