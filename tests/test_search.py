"""Beam search: batched equals unbatched, greedy, prefixes, processors, lengths; translation walks."""
import pytest
import torch

from _tiny import chat_documents
from docnmt.readers import read_documents
from docnmt.search import SearchConfig, beam_search, output_limit
from docnmt.translate import Translator


@pytest.fixture(scope="module")
def trained(tiny_model):
    """A tiny sent2sent model trained briefly (40 updates) on real chats, and its translator."""
    path = tiny_model("sent2sent")
    return Translator.load(path, device="cpu"), path


def sources(translator, n=6):
    docs = chat_documents(target=False)
    sents = [s for s in docs[0].src[:n]]
    ids = [translator.vocab.encode(s)[:20] + [translator.vocab.eos] for s in sents]
    width = max(map(len, ids))
    return torch.tensor([i + [0] * (width - len(i)) for i in ids]), ids


@pytest.mark.parametrize("beam", [1, 4])
def test_batched_equals_unbatched(trained, beam):
    tr, _ = trained
    src, ids = sources(tr)
    cfg = SearchConfig(beam=beam, max_len_b=5)
    batched = beam_search(tr.model, src, cfg, 2, 3, banned=tr.banned_ids(True))
    for row, hyps in zip(ids, batched):
        single = beam_search(tr.model, torch.tensor([row]), cfg, 2, 3, banned=tr.banned_ids(True))[0]
        assert single[0].tokens == hyps[0].tokens
        assert single[0].score == pytest.approx(hyps[0].score, abs=1e-4)


def test_greedy_is_argmax_decoding(trained):
    tr, _ = trained
    src, _ = sources(tr, 2)
    hyp = beam_search(tr.model, src[:1], SearchConfig(beam=1, max_len_b=5), 2, 3, banned=[0, 2])[0][0]
    tokens = torch.tensor([[2]])
    enc = tr.model.encode(src[:1])
    for _ in range(len(hyp.tokens)):
        logits = tr.model.output_projection(tr.model.decode(tokens, enc)[:, -1])
        logits[:, [0, 2]] = float("-inf")
        tokens = torch.cat([tokens, logits.argmax(-1, keepdim=True)], 1)
    assert tokens[0, 1:].tolist() == hyp.tokens


def test_beam_finds_score_at_least_greedy(trained):
    tr, _ = trained
    src, _ = sources(tr)
    g = beam_search(tr.model, src, SearchConfig(beam=1, lenpen=0.0), 2, 3, banned=[0, 2])
    b = beam_search(tr.model, src, SearchConfig(beam=5, lenpen=0.0), 2, 3, banned=[0, 2])
    assert all(bb[0].score >= gg[0].score - 1e-5 for gg, bb in zip(g, b))


def test_length_limits_and_nbest(trained):
    tr, _ = trained
    src, _ = sources(tr)
    out = beam_search(tr.model, src, SearchConfig(beam=4, max_len_a=0, max_len_b=3, nbest=3, min_len=2), 2, 3,
                      banned=[0, 2])
    for hyps in out:
        assert len(hyps) == 3 and hyps[0].score >= hyps[1].score >= hyps[2].score
        assert all(2 <= len(h.tokens) + 1 <= 4 for h in hyps)   # +1 for </s>, within max_len_b


def test_prefix_is_forced_and_processors_apply(trained):
    tr, _ = trained
    src, _ = sources(tr, 3)
    prefix = [[100, 101], [], [102]]
    out = beam_search(tr.model, src, SearchConfig(beam=3, max_len_b=6), 2, 3, banned=[0, 2], prefix=prefix)
    banned_word = 7

    def no_seven(step, tokens, lprobs, rows, limit):
        lprobs[:, banned_word] = float("-inf")
    seen, limits = [], []
    out2 = beam_search(tr.model, src, SearchConfig(beam=3, max_len_a=0, max_len_b=6), 2, 3, banned=[0, 2],
                       processors=[no_seven, lambda s, t, lp, r, lim: (seen.append(t.size(1)), limits.append(lim))])
    assert all(banned_word not in h[0].tokens for h in out2)
    assert seen[:3] == [1, 2, 3]
    assert limits[0].tolist() == [6] * 9          # each row's last step, beams included
    # forced tokens are not part of the returned hypothesis but condition it
    free = beam_search(tr.model, src, SearchConfig(beam=3, max_len_b=6), 2, 3, banned=[0, 2])
    assert out[1][0].tokens == free[1][0].tokens


def test_sentence_count_fits_every_separator_into_a_tight_length_limit(trained):
    """The sentence-count constraint of sliding decoding (docs/methods/length_bias.md#sliding-decoding)
    forces the missing separators when the length limit comes near, so
    each hypothesis holds exactly N−1 separators, in order, even when the model never picks them
    (two word ids stand in for <sep1>, <sep2> here)."""
    from docnmt.methods.length_bias import SentenceCount
    tr, _ = trained
    src, _ = sources(tr, 4)
    seps = [50, 51]
    count = SentenceCount(torch.tensor([3, 3, 2, 1]), seps, torch.tensor(seps), end=3)
    out = beam_search(tr.model, src, SearchConfig(beam=3, max_len_a=0, max_len_b=5), 2, 3, banned=[0, 2],
                      processors=[count])
    for n, hyps in zip([3, 3, 2, 1], out):
        assert [t for t in hyps[0].tokens if t in seps] == seps[: n - 1]
        assert len(hyps[0].tokens) <= 5          # steps 0..5, the last one the end token


def repeats(tokens, n, words):
    """The n-grams of word pieces that occur more than once in ``tokens``."""
    grams = [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]
    grams = [g for g in grams if all(words[0] <= t < words[1] for t in g)]
    return {g for g in grams if grams.count(g) > 1}


def test_no_repeat_ngram_bans_the_tokens_that_complete_a_seen_ngram():
    from docnmt.search import NoRepeatNgram
    tokens = torch.tensor([[2, 10, 11, 12, 10, 11],
                           [2, 10, 11, 600, 10, 11],      # 600: a separator, not a word piece
                           [2, 10, 11, 13, 14, 15]])
    lprobs = torch.zeros(3, 700)
    NoRepeatNgram(3, (4, 500))(5, tokens, lprobs, torch.arange(3), torch.full((3,), 9))
    assert torch.isinf(lprobs[0]).nonzero().squeeze(1).tolist() == [12]    # "10 11 12" again
    assert not torch.isinf(lprobs[1:]).any()      # "10 11 <sep>" is not blocked; row 2 has no "10 11" tail
    unigrams = torch.zeros(3, 700)
    NoRepeatNgram(1, (4, 500))(5, tokens, unigrams, torch.arange(3), torch.full((3,), 9))
    assert torch.isinf(unigrams[2]).nonzero().squeeze(1).tolist() == [10, 11, 13, 14, 15]   # not <s>
    short = torch.zeros(3, 700)
    NoRepeatNgram(7, (4, 500))(5, tokens, short, torch.arange(3), torch.full((3,), 9))
    assert not torch.isinf(short).any()
    with pytest.raises(ValueError, match="at least 1"):
        NoRepeatNgram(0, (4, 500))


def test_no_repeat_ngram_edges():
    """A hypothesis exactly n tokens long already holds an n-gram; word pieces are the ids in
    [first, end): the first counts, the end does not."""
    from docnmt.search import NoRepeatNgram
    lprobs = torch.zeros(3, 50)
    tokens = torch.tensor([[7, 7], [4, 4], [10, 10]])
    NoRepeatNgram(2, (4, 10))(1, tokens, lprobs, torch.arange(3), torch.full((3,), 9))
    assert torch.isinf(lprobs).nonzero().tolist() == [[0, 7], [1, 4]]     # "7 7", "4 4" again; 10 is no word


def test_with_processor_appends_to_the_search_arguments():
    from docnmt.search import with_processor
    first, second = object(), object()
    assert with_processor({"processors": [first], "max_len": 5}, second) == {"processors": [first, second],
                                                                            "max_len": 5}
    assert with_processor({}, second) == {"processors": [second]}


def test_forced_token_zero_is_forced_too():
    """Only -1 marks the end of a shorter prefix: id 0 is a token like any other (an imported
    model's vocabulary may start with a real token)."""
    from docnmt.search import _force_prefix, _prefix_tensor
    forced = _prefix_tensor([[0, 5], [6]], 2, "cpu")
    assert forced.tolist() == [[0, 5], [6, -1]]
    lprobs = torch.zeros(2, 8)
    _force_prefix(lprobs, forced, 1)
    assert lprobs[0].tolist() == [float("-inf")] * 5 + [0.0] + [float("-inf")] * 2 and not lprobs[1].isinf().any()
    lprobs = torch.zeros(2, 8)
    _force_prefix(lprobs, forced, 0)
    assert torch.isfinite(lprobs).nonzero().tolist() == [[0, 0], [1, 6]]


def test_next_token_log_probabilities_are_fp32_with_a_bf16_model():
    """Rows whose next token is forced skip the output layer; the others get fp32
    log-probabilities, also from a bf16 model."""
    from docnmt.model import ModelConfig, Transformer
    from docnmt.search import _next_lprobs
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=50, d_model=16, heads=2, ffn_dim=32, encoder_layers=1,
                                    decoder_layers=1)).to(torch.bfloat16)
    hidden = torch.randn(3, 16, dtype=torch.bfloat16)
    for forced in ([False, True, False], [False, False, False]):
        out = _next_lprobs(model, hidden, torch.tensor(forced))
        assert out.dtype == torch.float32 and out.shape == (3, 50)
        assert out[1].isinf().all() == forced[1]
        torch.testing.assert_close(out[0].exp().sum(), torch.tensor(1.0), rtol=1e-2, atol=1e-2)


def test_no_repeat_ngram_in_beam_search_and_translate(trained, monkeypatch):
    """The undertrained model loops; with the processor no hypothesis repeats a bigram, and
    ``decode.no_repeat_ngram_size`` puts it into every search of :meth:`Translator.translate`."""
    from dataclasses import replace

    import docnmt.translate as translate_module
    from docnmt.search import NoRepeatNgram
    tr, _ = trained
    src, _ = sources(tr)
    words = tr.vocab.word_ids
    cfg = SearchConfig(beam=4, max_len_a=0, max_len_b=40, nbest=4)
    free = beam_search(tr.model, src, cfg, 2, 3, banned=[0, 2])
    assert any(repeats(h.tokens, 2, words) for hyps in free for h in hyps)     # it does loop
    blocked = beam_search(tr.model, src, cfg, 2, 3, banned=[0, 2], processors=[NoRepeatNgram(2, words)])
    assert all(not repeats(h.tokens, 2, words) for hyps in blocked for h in hyps)
    assert all(len(hyps) == 4 for hyps in blocked)

    searched = []

    def spy(*args, **kwargs):
        out = beam_search(*args, **kwargs)
        searched.extend(h.tokens for hyps in out for h in hyps)
        return out
    monkeypatch.setattr(translate_module, "beam_search", spy)
    docs = chat_documents(target=False)[:1]
    tr.translate(docs, replace(tr.cfg.decode, no_repeat_ngram_size=2, max_len_b=40))
    assert searched and all(not repeats(t, 2, words) for t in searched)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["doc2sent", "doc2doc"])
def test_translate_walk_returns_one_line_per_sentence(tiny_dir, tiny_model, mode):
    tr = Translator.load(tiny_model(mode), device="cpu")              # the shared doc2sent / doc2doc model
    docs = read_documents(str(tiny_dir / "raw/chat.en"), fmt="marker")[:2]
    out, report = tr.translate(docs)
    assert [len(d.tgt) for d in out] == [len(d.src) for d in docs]
    assert report.sentences == sum(len(d.src) for d in docs)
    assert report.documents == 2


def test_an_end_token_in_the_prefix_does_not_end_the_hypothesis(trained):
    """Two-pass decoding forces context sentences that end with </s>: the search goes on to
    generate the current sentence (it used to stop there with an empty hypothesis)."""
    tr, _ = trained
    src, _ = sources(tr, 3)
    prefix = [[5, 6, 3, 7], [3], [5, 3]]                 # 3 is the end token
    out = beam_search(tr.model, src, SearchConfig(beam=3, max_len_b=6), 2, 3, banned=[0, 2], prefix=prefix)
    assert all(h[0].tokens for h in out)
    greedy = beam_search(tr.model, src, SearchConfig(beam=1, max_len_b=6), 2, 3, banned=[0, 2], prefix=prefix)
    assert all(h[0].tokens for h in greedy)


def test_min_len_counts_after_a_forced_prefix(trained):
    tr, _ = trained
    src, _ = sources(tr, 3)
    out = beam_search(tr.model, src, SearchConfig(beam=3, min_len=2, max_len_b=6), 2, 3, banned=[0, 2],
                      prefix=[[5, 6, 7]] * 3)
    assert all(len(h[0].tokens) >= 2 for h in out)


def test_length_limit_ends_with_the_models_eos_cost(trained):
    """A hypothesis cut at the length limit pays the model's log-probability of </s>."""
    tr, _ = trained
    src, _ = sources(tr, 1)
    hyp = beam_search(tr.model, src, SearchConfig(beam=1, max_len_a=0, max_len_b=2, lenpen=0.0, min_len=3),
                      2, 3, banned=[0, 2])[0][0]
    tokens = torch.tensor([[2] + hyp.tokens])
    with torch.no_grad():
        lp = torch.log_softmax(tr.model(src, tokens), -1)[0]
    expected = sum(float(lp[i, t]) for i, t in enumerate(hyp.tokens + [3]))
    assert hyp.score == pytest.approx(expected, abs=1e-4)


def test_each_translated_sentence_adds_max_len_b(trained):
    """The output limit is max_len_a · |src| + max_len_b per sentence a row translates (a document
    instance gets what its sentences would get alone); ``min_len`` above it makes every row run to
    its limit, where </s> is forced (after it: the limit counts the tokens before </s>)."""
    tr, _ = trained
    src, ids = sources(tr, 3)
    cfg = SearchConfig(beam=2, max_len_a=0.5, max_len_b=3, min_len=1000)
    sentences = torch.tensor([1, 4, 2])
    out = beam_search(tr.model, src, cfg, 2, 3, banned=[0, 2], sentences=sentences)
    want = [int(0.5 * len(i) + 3 * n) for i, n in zip(ids, sentences.tolist())]
    assert [len(h[0].tokens) for h in out] == want
    assert output_limit(torch.tensor([len(i) for i in ids]), cfg).tolist() == [int(0.5 * len(i) + 3) for i in ids]
    plain = beam_search(tr.model, src, cfg, 2, 3, banned=[0, 2])       # one sentence each: fairseq's a·|x| + b
    assert [len(h[0].tokens) for h in plain] == [int(0.5 * len(i) + 3) for i in ids]


@pytest.mark.parametrize("name,per_instance", [("sent2sent", None), ("doc2sent", None), ("doc2doc", "sentences")])
def test_translation_gives_each_instance_max_len_b_per_sentence(tiny_model, monkeypatch, name, per_instance):
    """Translating documents, a Doc2Doc instance's limit counts its sentences; a sentence model's
    and Doc2Sent's (context in the source, one sentence out) count one."""
    from docnmt import translate as translate_module
    tr = Translator.load(tiny_model(name), device="cpu")
    seen = []

    def spy(*args, sentences=None, **kw):
        seen.extend(sentences.tolist())
        return beam_search(*args, sentences=sentences, **kw)
    monkeypatch.setattr(translate_module, "beam_search", spy)
    docs = chat_documents(target=False)[:2]
    docs = [d.src[:7] for d in docs]
    tr.translate(docs, SearchConfig(beam=1, max_len_b=2, fallback="none"))     # no sentence instances
    if per_instance is None:
        assert seen == [1] * sum(map(len, docs))
    else:
        assert sum(seen) == sum(map(len, docs)) and max(seen) > 1


@pytest.mark.parametrize("lenpen", [1.0, 0.6])
def test_a_forced_prefix_is_context_not_length(trained, lenpen):
    """With a forced prefix the score is the generated part's log-probability (</s> included)
    over its own length: the prefix neither costs nor counts (docs/methods/length_bias.md#sliding-decoding:
    only the new sentences are searched)."""
    tr, _ = trained
    src, _ = sources(tr, 2)
    prefix = [[5, 6, 7, 8, 9, 10, 11, 12], [13, 14, 15]]
    out = beam_search(tr.model, src, SearchConfig(beam=3, max_len_b=6, lenpen=lenpen), 2, 3, banned=[0, 2],
                      prefix=prefix)
    for i, (pre, hyps) in enumerate(zip(prefix, out)):
        hyp = hyps[0]
        tokens = torch.tensor([[2] + pre + hyp.tokens])
        with torch.no_grad():
            lp = torch.log_softmax(tr.model(src[i: i + 1], tokens), -1)[0]
        new = hyp.tokens + [3]
        total = sum(float(lp[len(pre) + j, t]) for j, t in enumerate(new))
        assert hyp.score == pytest.approx(total / len(new) ** lenpen, abs=1e-4)


def test_gnmt_length_penalty():
    from docnmt.search import length_penalty
    assert length_penalty(7, SearchConfig(lenpen=0.6, lenpen_style="gnmt")) == pytest.approx((12 / 6) ** 0.6)
    assert length_penalty(7, SearchConfig(lenpen=1.0)) == 7
    with pytest.raises(ValueError, match="^unknown lenpen_style 'other'; choose one of fairseq, gnmt$"):
        length_penalty(7, SearchConfig(lenpen_style="other"))


def _method_models():
    """A small random model of every method (the builders tests of each method use)."""
    from docnmt.methods import context_transformer, docflat, gtransformer, ptransformer
    from docnmt.methods.length_bias import LengthAwareScale
    from docnmt.model import AttentionPolicy, ModelConfig, Transformer
    base = dict(vocab_size=50, d_model=32, heads=4, ffn_dim=64, encoder_layers=2, decoder_layers=2, dropout=0.0)
    cfg = lambda **kw: ModelConfig(**{**base, **kw})  # noqa: E731
    length_aware = Transformer(cfg(), AttentionPolicy(cfg()))
    length_aware.add_piece("length_scale", LengthAwareScale())
    return {
        "transformer": Transformer(cfg(), AttentionPolicy(cfg())),
        "length_aware": length_aware,
        "gtransformer": gtransformer.build(cfg(), gtransformer.GTransformerOptions(1, 1, 1), 2, 4),
        "ptransformer": ptransformer.build(cfg(), ptransformer.PTransformerOptions(rel_max_distance=6)),
        "context_transformer": context_transformer.build(cfg()),
        "docflat": docflat.build(cfg()),
        "docflat_mbe": docflat.build(cfg(), docflat.DocFlatOptions(flat_block="mbe"), mean_token=1),
    }


@pytest.mark.parametrize("method", list(_method_models()))
def test_a_shared_prefix_runs_once_per_input_with_the_same_result(method, monkeypatch):
    """The forced prefix all inputs share in length goes through the decoder once per input and
    the cache is copied to the beams: the same hypotheses and scores as feeding it once per beam,
    for every method's cache (self-attention keys, cross and context attention, DocFlat's
    cross-row attention, G-Transformer's tags)."""
    from docnmt import search
    torch.manual_seed(0)
    model = _method_models()[method].eval()
    g = torch.Generator().manual_seed(1)
    src = torch.randint(5, 50, (3, 8), generator=g)
    src[1, 6:] = 0
    inputs = {"ctx": torch.randint(5, 50, (3, 6), generator=g)} if method == "context_transformer" else None
    prefix = [[7, 8, 9, 10, 11, 2, 12], [13, 14, 15, 16], [17, 18, 19, 20, 21]]
    if method == "gtransformer":                       # sentences of the group format: <s> … </s>
        prefix = [[2, 7, 8, 3, 2, 9], [2, 10, 11, 3], [2, 12, 13, 14, 3]]
    runs, calls, decode = [], [], model.decode
    monkeypatch.setattr(model, "decode", lambda tokens, enc, cache=None: calls.append(
        (tuple(tokens.shape), None if cache is None else cache.length)) or decode(tokens, enc, cache))
    for shared in (True, False):
        if not shared:   # the prefix then goes through the decoder with the first step, once per beam
            monkeypatch.setattr(search, "_prefill", lambda *args: None)
        out = beam_search(model, src, SearchConfig(beam=3, max_len_b=5, nbest=3), 2, 3, banned=[0],
                          prefix=prefix, inputs=inputs)
        runs.append(out)
        if shared:       # <s> and the 3 forced tokens every input has, once per input, into the cache
            assert calls[0] == ((3, 4), 0) and calls[1][0] == (9, 5) and calls[1][1] > 0
    for a, b in zip(*runs):
        assert [h.tokens for h in a] == [h.tokens for h in b]
        assert [h.score for h in a] == pytest.approx([h.score for h in b], rel=1e-5)


@pytest.mark.parametrize("method", ["transformer", "docflat"])
def test_ranks_without_a_candidate_repeat_rank_zero_while_a_prefix_is_forced(method, monkeypatch):
    """While an input's prefix is forced only rank 0 has a finite score; the other ranks must
    hold the same forced prefix, not arbitrary tokens, because DocFlat's decoder FBA lets rank r
    of every other input attend to them (docs/methods/docflat.md#df-beams)."""
    torch.manual_seed(0)
    model = _method_models()[method].eval()
    src = torch.randint(5, 50, (3, 8), generator=torch.Generator().manual_seed(1))
    prefix = [[], [7, 8, 9, 10, 11, 12, 13], [14, 15, 16]]
    seen, decode = [], model.decode
    monkeypatch.setattr(model, "decode",
                        lambda tokens, *a, **kw: seen.append(tokens.clone()) or decode(tokens, *a, **kw))
    K = 3
    beam_search(model, src, SearchConfig(beam=K, max_len_b=12, min_len=5), 2, 3, banned=[0], prefix=prefix)
    checked = 0
    for tokens in seen:
        if tokens.size(0) == 3 and tokens.size(1) == 1:     # the first step runs once per input (beams identical)
            continue
        if tokens.size(0) != 3 * K:            # an input has finished
            break
        for i, p in enumerate(prefix):
            if tokens.size(1) - 1 <= len(p):    # every token after <s> forced so far
                rows = tokens[i * K:(i + 1) * K]
                assert (rows == rows[:1]).all(), (i, rows)
                checked += 1
    assert checked > 6


def test_bf16_decoding_casts_each_weight_once_per_batch(trained):
    """Under autocast, decoding runs outside inference mode so that autocast keeps each weight's
    bf16 copy: without it every step cast every weight again.
    The translations are those of the same autocast either way."""
    from torch.utils._python_dispatch import TorchDispatchMode
    tr, _ = trained
    src, _ = sources(tr, 4)
    weights = {p.data_ptr() for p in tr.model.parameters()}

    class Casts(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.weight_casts = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            casts = (torch.ops.aten._to_copy.default, torch.ops.aten.to.dtype)     # the second in inference mode
            if func in casts and args[0].data_ptr() in weights:
                self.weight_casts += 1
            return func(*args, **(kwargs or {}))

    cfg = SearchConfig(beam=2, max_len_b=12)
    with Casts() as casts, torch.autocast("cpu", dtype=torch.bfloat16):
        hyps = beam_search(tr.model, src, cfg, 2, 3, banned=tr.banned_ids(True))
    assert max(len(h[0].tokens) for h in hyps) >= 2          # two steps or more, each reading every weight
    assert 0 < casts.weight_casts <= len(weights)
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):       # every step casting anew
        again = beam_search.__wrapped__(tr.model, src, cfg, 2, 3, banned=tr.banned_ids(True))
    assert [(h[0].tokens, h[0].score) for h in again] == [(h[0].tokens, h[0].score) for h in hyps]
