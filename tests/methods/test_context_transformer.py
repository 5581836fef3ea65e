"""Context-encoder Transformer (docs/methods/context_transformer.md, its "Tests" section): context
input, gate, two-step training."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from _tiny import assert_incremental_equals_full, random_pair, tiny_config, translate_checked
from docnmt import methods
from docnmt.attention import AttnSpec
from docnmt.data import InstanceSet, sent_instances
from docnmt.decoder_state import DecoderCache
from docnmt.errors import ConfigError
from docnmt.methods import make_joiner
from docnmt.methods.context_transformer import ContextOptions, ContextTransformer, GatedContextSublayer, build
from docnmt.model import AttentionPolicy, ModelConfig, State, Transformer
from docnmt.training import Trainer

CFG = ModelConfig(vocab_size=50, d_model=32, heads=4, ffn_dim=64, encoder_layers=2, decoder_layers=2,
                  dropout=0.0)


def test_context_is_the_previous_source_sentences_then_eos(tiny_corpus, tiny_vocab):
    iset = InstanceSet(tiny_corpus, sent_instances(tiny_corpus), make_joiner(tiny_vocab, "index", 2))
    eos = tiny_vocab.eos
    d0, d1 = int(tiny_corpus.doc_offsets[0]), int(tiny_corpus.doc_offsets[1])
    assert iset.context(d0).tolist() == [eos]                            # a document's first sentence
    want = np.concatenate([tiny_corpus.src[d0], [eos]])
    assert iset.context(d0 + 1).tolist() == want.tolist()
    want = np.concatenate([tiny_corpus.src[d0 + 1], tiny_corpus.src[d0 + 2], [eos]])
    assert iset.context(d0 + 3).tolist() == want.tolist()
    assert iset.context(d1).tolist() == [eos]                            # never across documents
    batch = iset.collate([d0, d0 + 3])
    assert batch["ctx"].shape[0] == 2 and batch["ctx"][0, 0] == eos and (batch["ctx"][0, 1:] == 0).all()
    assert iset.ctx_lens.tolist() == [len(iset.context(k)) for k in range(len(iset))]


def test_batches_count_the_context_length(tiny_corpus, tiny_vocab):
    """Contexts are longer than their sentences: a batch's padded context input must stay
    within --max-tokens like its source and target."""
    iset = InstanceSet(tiny_corpus, sent_instances(tiny_corpus), make_joiner(tiny_vocab, "index", 2))
    assert iset.ctx_lens.mean() > 1.5 * iset.src_lens.mean()
    for b in iset.batches(200, seed=1, epoch=1):
        batch = iset.collate(b)
        assert len(b) == 1 or batch["ctx"].numel() <= 200
        assert len(b) == 1 or batch["src"].numel() <= 200
    assert sorted(np.concatenate(iset.batches(200, seed=1, epoch=1)).tolist()) == list(range(len(iset)))


def test_gate_is_per_position_and_channel_in_0_1():
    torch.manual_seed(0)
    sub = GatedContextSublayer(CFG, "enc.0.context").eval()
    a, d = torch.randn(2, 5, 32), torch.randn(2, 5, 32)
    lam = torch.sigmoid(sub.gate_input(a) + sub.gate_context(d))
    assert lam.shape == (2, 5, 32) and ((lam > 0) & (lam < 1)).all()
    torch.testing.assert_close(sub.combine(a, d), lam * a + (1 - lam) * d)
    assert sub.gate_input.bias is None and sub.gate_context.bias is None
    plain = GatedContextSublayer(CFG, "x.0.context", gated=False).eval()
    torch.testing.assert_close(plain.combine(a, d), a + d)               # the residual ablation


@pytest.mark.parametrize("place,enc,dec", [("both", True, True), ("encoder", True, False), ("decoder", False, True)])
def test_context_in_switch(place, enc, dec):
    model = build(CFG, ContextOptions(context_in=place))
    assert all(bool(len(layer.inserted)) == enc for layer in model.encoder.layers)
    assert all(bool(len(layer.inserted)) == dec for layer in model.decoder.layers)
    with pytest.raises(ConfigError):
        build(CFG, ContextOptions(context_in="nowhere"))


def test_incremental_decoding_with_context_equals_full():
    torch.manual_seed(0)
    model = build(CFG).eval()
    src, tgt = random_pair()
    ctx = torch.randint(4, 50, (2, 6))
    ctx[0, 3:] = 0

    class WithContext(torch.nn.Module):      # the helper calls encode(src); give it the context
        def encode(self, s):
            return model.encode(s, ctx=ctx)

        def decode(self, *a):
            return model.decode(*a)
    assert_incremental_equals_full(WithContext(), src, tgt)
    with torch.no_grad():                    # the context matters
        other = model.decode(tgt, model.encode(src, ctx=torch.flip(ctx, [1])))
        assert not torch.allclose(other, model.decode(tgt, model.encode(src, ctx=ctx)))
    assert isinstance(model.encoder.layers[0].inserted["1"], GatedContextSublayer)


def context_batch(seed=0):
    """A source batch, decoder input and a context batch whose first row is padded."""
    src, tgt = random_pair(seed)
    ctx = torch.randint(4, 50, (2, 6), generator=torch.Generator().manual_seed(seed))
    ctx[0, 3:] = 0
    return src, tgt, ctx


@pytest.mark.parametrize("gate", [True, False])
def test_layer_structure_names_and_gates(gate):
    """Gated context attention right after self-attention in every layer (the plain residual
    with ``context_gate: false``), named per layer like the other attentions; the context
    encoder has ``context_layers`` layers; settings reach the new sublayers."""
    model = build(CFG, ContextOptions(context_gate=gate, context_layers=2))
    for side, layers in (("enc", model.encoder.layers), ("dec", model.decoder.layers)):
        for i, layer in enumerate(layers):
            sub = layer.inserted["1"]
            assert list(layer.inserted) == ["1"] and sub.gated == gate and hasattr(sub, "gate_input") == gate
            assert (sub.attn.name, layer.sublayers[0].attn.name) == (f"{side}.{i}.context", f"{side}.{i}.self")
    assert [layer.sublayers[0].attn.name for layer in model.context_encoder.layers] == ["ctx.0.self", "ctx.1.self"]
    policy = AttentionPolicy(CFG)
    assert ContextTransformer(CFG, policy=policy).policy is policy
    other = ModelConfig(**{**vars(CFG), "attention_dropout": 0.3, "pre_norm": True})
    sub = GatedContextSublayer(other, "enc.0.context")
    assert sub.attn.dropout == 0.3 and sub.pre_norm is True


def test_silenced_context_attention_leaves_the_sentence_model():
    """Two-step training's premise: the sentence model's parameters keep their names, and with
    the context attention's output at zero (plain residual) the model computes what the sentence
    Transformer with those weights computes."""
    torch.manual_seed(0)
    model = build(CFG, ContextOptions(context_gate=False)).eval()
    plain = Transformer(CFG).eval()
    missing, unexpected = plain.load_state_dict(model.state_dict(), strict=False)
    assert not missing and all(".inserted." in k or k.startswith("context_encoder.") for k in unexpected)
    with torch.no_grad():
        for layer in [*model.encoder.layers, *model.decoder.layers]:
            layer.inserted["1"].attn.out_proj.weight.zero_()
            layer.inserted["1"].attn.out_proj.bias.zero_()
        src, tgt, ctx = context_batch()
        torch.testing.assert_close(model(src, tgt, ctx=ctx), plain(src, tgt), rtol=1e-4, atol=1e-4)


def test_context_padding_changes_nothing():
    """Neither the context encoder nor the context attention reads padded context positions."""
    torch.manual_seed(0)
    model = build(CFG).eval()
    src, tgt, ctx = context_batch()
    with torch.no_grad():
        torch.testing.assert_close(model(src, tgt, ctx=F.pad(ctx, (0, 4))), model(src, tgt, ctx=ctx),
                                   rtol=1e-5, atol=1e-5)


def test_context_encoder_reads_the_embedding_without_dropout():
    """The context encoder runs its layers over the source embedding of the context, without
    the embedding's dropout even in training (docs/methods/context_transformer.md#context-encoder)."""
    torch.manual_seed(0)
    model = build(ModelConfig(**{**vars(CFG), "dropout": 0.5}), ContextOptions(context_layers=2)).train()
    for layer in model.context_encoder.layers:
        layer.eval()                           # only the embedding's dropout could still differ
    _, _, ctx = context_batch()
    with torch.no_grad():
        first, second = model.encode_extra(ctx=ctx), model.encode_extra(ctx=ctx)
        torch.testing.assert_close(first["context"], second["context"])
        x = model.encoder.embed(ctx, dropout=False)
        assert not torch.allclose(first["context"], x)                   # the layers change it
        state = State({"enc_self": AttnSpec(mask=ctx.eq(0)[:, None, None, :])})
        for layer in model.context_encoder.layers:
            x = layer(x, state)
        torch.testing.assert_close(first["context"], x)
    assert torch.equal(first["context_pad"], ctx.eq(0))


def test_context_keys_and_values_are_projected_once_while_decoding(monkeypatch):
    """In incremental decoding each context attention projects the encoded context to keys and
    values at the first step only (its cache entry); later steps project just their query."""
    torch.manual_seed(0)
    model = build(CFG).eval()
    src, tgt, ctx = context_batch()
    attn = model.decoder.layers[1].inserted["1"].attn
    parts, project = [], attn.project
    monkeypatch.setattr(attn, "project", lambda x, part: parts.append((part.start, part.stop)) or project(x, part))
    with torch.no_grad():
        enc, cache = model.encode(src, ctx=ctx), DecoderCache()
        for t in range(4):
            model.decode(tgt[:, : t + 1], enc, cache)
    assert parts == [(0, 1), (1, 3), (0, 1), (0, 1), (0, 1)]


def test_errors_say_what_is_needed():
    with pytest.raises(ConfigError, match="unknown context_in 'nowhere'; choose one of both, encoder, decoder"):
        ContextOptions(context_in="nowhere")
    with pytest.raises(ConfigError, match=r"^a context-encoder Transformer needs a context input \(data.context_input"):
        build(CFG).encode(torch.ones(1, 3, dtype=torch.long))
    cfg = tiny_config("sent2sent").override({"method.name": "context_transformer", "data.context_input": 0})
    with pytest.raises(ConfigError, match=r"^a context-encoder Transformer needs data.context_input > 0 \(previous"):
        methods.check(cfg)
    methods.check(cfg.override({"data.context_input": 1}))
    for other in ("sent2sent", "doc2sent"):     # a network that never reads the context input: refused
        with pytest.raises(ConfigError, match=r"data.context_input 2 \(--context-input\): method transformer does "
                                              r"not read a context input \(methods that do: context_transformer\)"):
            methods.check(tiny_config(other).override({"data.context_input": 2}))


@pytest.mark.slow
def test_two_step_training_changes_only_the_new_parameters(tiny_dir, tiny_model, tmp_path):
    """Step 2 loads the sentence model, freezes it and trains only the context parameters."""
    from safetensors.torch import load_file
    data, sent_dir = tiny_dir / "data", tiny_model("sent2sent")
    step2 = tiny_config("sent2sent", max_update=5, freeze_pretrained=True).override(
        {"method.name": "context_transformer", "data.context_input": 2})
    tr = Trainer.from_dirs(step2, data, tmp_path / "ctx", progress_bar=False, init_from=sent_dir)
    before = {n: p.detach().clone() for n, p in tr.model.named_parameters()}
    tr.train()
    sent = load_file(str(sent_dir / "model.safetensors"))
    after = dict(tr.model.named_parameters())
    assert tr.pretrained and set(tr.pretrained) <= set(sent)
    for n in before:
        if n in tr.pretrained:
            assert torch.equal(after[n], sent[n]), n                        # frozen: the sentence model's
        else:
            assert not torch.equal(after[n], before[n]), n                  # new: trained
    assert any("context_encoder" in n for n in before if n not in tr.pretrained)
    translate_checked(tmp_path / "ctx", tiny_dir / "raw/chat.en", 6)


def test_sentence_pairs_mixed_into_step_2_get_their_own_source_as_context(tiny_vocab, tmp_path):
    """Pairs of a sentence-level corpus get the source sentence itself as context
    (docs/methods/context_transformer.md#dt-step2-data); the flag survives saving the corpus."""
    from docnmt.data import Corpus
    from docnmt.document import Document
    docs = [Document("ted", ["First sentence here.", "Second one."], ["Erster Satz.", "Zweiter."]),
            Document("sent:1", ["A lonely sentence."], ["Ein einsamer Satz."], {"sentence_level": True})]
    corpus = Corpus.encode(docs, tiny_vocab)
    corpus.save(tmp_path, "train")
    corpus = Corpus.load(tmp_path, "train")
    assert corpus.sentence_level.tolist() == [False, True]
    eos = tiny_vocab.eos
    own = InstanceSet(corpus, sent_instances(corpus), make_joiner(tiny_vocab, "index", 2, context_self=True))
    assert own.context(2).tolist() == corpus.src[2].tolist() + [eos]           # the sentence itself
    assert own.context(0).tolist() == [eos]                                     # documents as before
    assert own.context(1).tolist() == corpus.src[0].tolist() + [eos]
    plain = InstanceSet(corpus, sent_instances(corpus), make_joiner(tiny_vocab, "index", 2))
    assert plain.context(2).tolist() == [eos]
    for iset in (own, plain):
        assert iset.ctx_lens.tolist() == [len(iset.context(k)) for k in range(len(iset))]
