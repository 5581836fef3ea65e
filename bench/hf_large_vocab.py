"""Large pretrained vocabularies on CPU (docs/pretrained.md#memory-and-time): one training update and
one decoded document of a randomly initialised model with the dimensions of NLLB-200-distilled-600M
(1024-d, 12+12 layers, 16 heads, FFN 4096, 256,206 tokens, pre-LN, fairseq sinusoids) as
``docnmt import-hf`` configures it, against the same model with a 32,000-token vocabulary.

Each measurement runs in a fresh process (its own peak memory): ``update`` is one Adam update on a
batch of 4 × 512-token Doc2Doc instances (2,048 target tokens, the G-Transformer + mBART recipe's
``--max-tokens``), forward, backward and optimizer step; ``decode`` is beam-5 decoding of one
260-token document (one Doc2Doc instance, ``--max-len-a 1.2 --max-len-b 10``; a random model never
ends, so every step up to the limit is taken). Token ids are random (no tokenizer is needed).

    python bench/hf_large_vocab.py              # all four, writes bench/results/hf/large_vocab_cpu.json
    python bench/hf_large_vocab.py update 256206  # one measurement, prints JSON
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

NLLB_600M = {"d_model": 1024, "encoder_layers": 12, "decoder_layers": 12, "encoder_attention_heads": 16,
             "decoder_attention_heads": 16, "encoder_ffn_dim": 4096, "decoder_ffn_dim": 4096,
             "max_position_embeddings": 1024, "activation_function": "relu", "scale_embedding": True,
             "dropout": 0.1, "attention_dropout": 0.1, "activation_dropout": 0.0, "pad_token_id": 1}
NEW_SYMBOLS = 516          # <start> and docnmt's symbols, added by import-hf
NEEDS_GB = {"update": 13.0, "decode": 4.0}   # refuse to start below this much available memory


def available_gb() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 2**20
    return float("nan")


def model(vocab: int):
    import torch

    from docnmt.hf import model_config
    from docnmt.model import Transformer
    cfg = model_config("m2m_100", NLLB_600M)
    cfg.vocab_size, cfg.pad_id = vocab + NEW_SYMBOLS, 1
    torch.manual_seed(0)
    return Transformer(cfg)


def measure(stage: str, vocab: int) -> dict:
    import torch
    from common import peak_rss_mb
    torch.set_num_threads(int(os.environ.get("THREADS", "2")))
    g = torch.Generator().manual_seed(0)
    m = model(vocab)
    params = sum(p.numel() for p in m.parameters())
    base = peak_rss_mb()
    if stage == "update":
        m.train()
        src = torch.randint(4, vocab, (4, 512), generator=g)
        tgt = torch.randint(4, vocab, (4, 513), generator=g)
        opt = torch.optim.Adam(m.parameters(), lr=1e-5, fused=True)
        t0, c0 = time.perf_counter(), time.process_time()
        loss, _, ntok = m(src, tgt[:, :-1], tgt[:, 1:], 0.1)
        loss.backward()
        opt.step()
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
        extra = {"target_tokens": ntok}
    else:
        from docnmt.search import SearchConfig, beam_search
        m.eval()
        src = torch.randint(4, vocab, (1, 260), generator=g)
        t0, c0 = time.perf_counter(), time.process_time()
        hyp = beam_search(m, src, SearchConfig(beam=5, max_len_a=1.2, max_len_b=10), vocab, 2)[0][0]   # <start>, </s>
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
        extra = {"source_tokens": 260, "output_tokens": len(hyp.tokens)}
    return {"stage": stage, "vocab": vocab, "rows": vocab + NEW_SYMBOLS, "parameters": params,
            "seconds": round(seconds, 2), "cpu_seconds": round(cpu, 2), "peak_rss_mb": round(peak_rss_mb()),
            "model_rss_mb": round(base),
            "threads": torch.get_num_threads(), **extra}


def main() -> None:
    if len(sys.argv) == 3:
        print(json.dumps(measure(sys.argv[1], int(sys.argv[2]))))
        return
    from common import run_isolated
    rows = []
    for stage in ("decode", "update"):
        for vocab in (256206, 32000):
            if available_gb() < NEEDS_GB[stage]:
                sys.exit(f"{stage}: {available_gb():.1f} GB available, {NEEDS_GB[stage]} GB needed; not started")
            load = os.getloadavg()[0]
            row = run_isolated(__file__, stage, vocab)
            row["load_average_before"] = round(load, 2)
            print(json.dumps(row), file=sys.stderr)
            rows.append(row)
    import platform

    import torch
    out = HERE / "results" / "hf"
    out.mkdir(parents=True, exist_ok=True)
    note = ("CPU, fp32; the machine was shared with other jobs (a training run, test suites; see "
            "load_average_before): wall-clock seconds are inflated by the sharing, cpu_seconds (this process's "
            "CPU time, all threads) much less" if max(r["load_average_before"] for r in rows) > 1.0
            else "CPU, fp32, idle machine")
    (out / "large_vocab_cpu.json").write_text(json.dumps(
        {"what": __doc__.split("\n\n")[0], "note": note, "cpu": platform.processor() or platform.machine(),
         "cores": os.cpu_count(), "torch": torch.__version__, "results": rows}, indent=1))
    print(f"saved {out / 'large_vocab_cpu.json'}", file=sys.stderr)


if __name__ == "__main__":
    main()
