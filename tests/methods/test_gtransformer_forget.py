"""G-Transformer decoding forgets finished sentences (docs/performance.md#document-models): group
self-attention's cache drops the keys before the earliest current sentence (``AttnSpec.first_key``),
and beam search gives the same hypotheses and scores as with every key kept."""
import pytest
import torch

from docnmt.decoder_state import DecoderCache
from docnmt.methods import gtransformer
from docnmt.methods.gtransformer import FrameConstraint, GroupAttentionPolicy, GTransformerOptions, build
from docnmt.model import ModelConfig
from docnmt.search import SearchConfig, beam_search

PAD, BOS, EOS, EOD = 0, 2, 3, 49
CFG = ModelConfig(vocab_size=50, d_model=32, heads=4, ffn_dim=64, encoder_layers=2, decoder_layers=3,
                  dropout=0.0)


def doc(*lengths, start=10):
    """A group-format row: <s> w… </s> per sentence."""
    out, w = [], start
    for n in lengths:
        out += [BOS] + list(range(w, w + n)) + [EOS]
        w += n
    return out


def padded(rows):
    width = max(map(len, rows))
    return torch.tensor([r + [PAD] * (width - len(r)) for r in rows])


def test_first_key_is_the_earliest_current_sentence_and_the_cut_spec_is_the_full_ones_columns():
    """The keys before ``first_key`` are blocked for every query of the step (and the cut spec's
    mask is the rest of the full one: causality stays aligned to the last keys, with one query
    and with several); none while a query has tag 0 or in a full pass."""
    pol = GroupAttentionPolicy(CFG, BOS, EOD)
    src = padded([doc(2, 2, 2)] * 3)
    tgt = torch.tensor([[EOD] + doc(2, 3, 1)[:-1], [EOD] + doc(3, 1, 2)[:-1], [EOD] + doc(1, 7)[:-1]])
    # the rows' current sentences start at 10, 9 (their third <s>) and 4 (row 2's second)
    for offset, want in [(tgt.size(1) - 1, 4), (tgt.size(1) - 2, 4), (0, None)]:
        spec = pol.decoder_specs(tgt, src, src.eq(PAD), offset)["dec_self"]
        assert spec.first_key == want
        if want is None:
            continue
        nq, nk = tgt.size(1) - offset, tgt.size(1)
        full = spec.blocked(nq, nk, "cpu")
        assert full[..., :want].all()
        assert torch.equal(spec.keys_from(want).blocked(nq, nk - want, "cpu"), full[..., want:])
    start = pol.decoder_specs(tgt[:, :2], src, src.eq(PAD), 1)["dec_self"]           # the first <s>: from 1
    assert start.first_key == 1
    tagged_zero = torch.cat([tgt[:, :3], torch.tensor([[EOD], [5], [5]])], 1)        # a query of tag 0
    assert pol.decoder_specs(tagged_zero, src, src.eq(PAD), 3)["dec_self"].first_key is None
    assert all(s.first_key is None for k, s in pol.decoder_specs(tgt, src, src.eq(PAD), 5).items() if k != "dec_self")


@pytest.mark.parametrize("options, prefix", [
    (GTransformerOptions(1, 2, 1), None),
    (GTransformerOptions(1, 2, 1, sentence_positions=True), None),
    (GTransformerOptions(1, 1, 1), [doc(1, start=20), doc(2, 1, start=20)[:-1], []]),
])
def test_beam_search_forgetting_finished_sentences_gives_the_same_hypotheses(options, prefix, monkeypatch):
    """Three documents of several sentences, 3 beams, with and without forgetting: the same
    tokens and the same scores, and the self-attention caches did drop keys."""
    torch.manual_seed(0)
    model = build(CFG, options, BOS, EOD).eval()
    src = padded([doc(3, 1, 2, 2, 1), doc(2, 2), doc(1, 3, 1, 1)])
    kept, forget = [], DecoderCache.forget
    monkeypatch.setattr(DecoderCache, "forget", lambda self, name, first: kept.append(
        (self._kv[name].n, forget(self, name, first))) or kept[-1][1])

    def run():
        frame = FrameConstraint(src, BOS, EOS, PAD, EOD, a=1.0, b=2)
        return beam_search(model, src, SearchConfig(beam=3, nbest=3), EOD, EOD, banned=[PAD], prefix=prefix,
                           processors=[frame], max_len=frame.max_len())

    forgetting = run()
    assert max(lo for _, lo in kept) > 10 and sum(n - lo for n, lo in kept) < 0.5 * sum(n for n, _ in kept)
    monkeypatch.setattr(gtransformer, "first_key", lambda tags, offset: None)
    kept.clear()
    keeping = run()
    assert not kept
    for a, b in zip(forgetting, keeping):
        assert len(a) == 3 and [h.tokens for h in a] == [h.tokens for h in b]
        assert [h.score for h in a] == [h.score for h in b]
    assert max(h.tokens.count(BOS) for nbest in forgetting for h in nbest) >= 4      # several sentences
