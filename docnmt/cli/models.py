"""The verbs about model directories and presets: ``docnmt average`` (checkpoint averaging),
``presets`` (the named presets), ``import-hf`` and ``export-hf`` (Hugging Face models) and
``quickstart`` (prepare, train and translate the bundled corpus)."""
from __future__ import annotations

import sys
from pathlib import Path

from ..errors import DocnmtError
from .files import refuse_overwrite, refuse_unwritable
from .flags import add_verb, positive_int


def _stderr(message: str) -> None:
    print(message, file=sys.stderr)


def add_average(sub) -> None:
    p = add_verb(sub, "average", "average the last N checkpoints of a model directory")
    p.add_argument("model", help="model directory")
    p.add_argument("--last", type=positive_int, default=5, metavar="N",
                   help="average this many of the newest checkpoints (fewer if there are fewer, said loudly)")
    p.add_argument("--output", "-o", help="file to write the averaged weights to (default: MODEL/averaged.safetensors)")
    p.add_argument("--force", action="store_true", help="overwrite --output if it exists")


def cmd_average(args) -> int:
    from ..checkpoint import average_checkpoints, list_checkpoints
    ckpts = list_checkpoints(Path(args.model))[-args.last:]
    if not ckpts:
        raise DocnmtError(f"{args.model}: no checkpoints to average")
    out = Path(args.output or Path(args.model) / "averaged.safetensors")
    refuse_overwrite(out, args.force)
    refuse_unwritable([out])
    if len(ckpts) < args.last:
        _stderr(f"WARNING: --last {args.last} asked for, but {args.model} has only {len(ckpts)} checkpoint"
                f"{'s' * (len(ckpts) != 1)}: averaging those")
    average_checkpoints(ckpts, out)
    _stderr(f"averaged {len(ckpts)} checkpoints ({', '.join(c.name for c in ckpts)}) into {out}")
    return 0


def add_quickstart(sub) -> None:
    p = add_verb(sub, "quickstart", "prepare, train and translate the bundled chat corpus")
    p.add_argument("--workdir", default="docnmt-quickstart",
                   help="directory for the prepared data, the model and the translation")
    p.add_argument("--updates", type=positive_int, default=1200,
                   help="training updates (the result depends on these, not on how busy the machine is)")
    p.add_argument("--minutes", type=float, default=30.0,
                   help="time cap: stop training after this many minutes even if --updates are not reached "
                        "(said loudly when it happens)")
    p.add_argument("--force", action="store_true",
                   help="start over in a --workdir an earlier quick start made (without it, a second run goes on "
                        "from where the first stopped)")


def cmd_quickstart(args) -> int:
    from ..quickstart import run
    return run(Path(args.workdir), args.minutes, args.force, args.updates)


def add_presets(sub) -> None:
    p = add_verb(sub, "presets", "list the named presets, or show one: its description and every value it sets")
    p.add_argument("name", nargs="?", help="a preset: its description, then its whole config as config.yaml "
                                           "would hold it (the values a training with --arch NAME starts from)")


def cmd_presets(args) -> int:
    """Each preset's name, then its whole description wrapped to the terminal in a second column;
    with a name, that preset's description and resolved config."""
    import shutil
    import textwrap

    import yaml

    from ..config import Config, load_preset_dict, preset_description, preset_names
    if args.name:
        load_preset_dict(args.name)          # an unknown name: one line, with the nearest preset
        cfg = Config.load(args.name)
        print("\n".join(f"# {line}" for line in textwrap.wrap(preset_description(args.name), 98)))
        print(yaml.safe_dump(cfg.to_dict(), sort_keys=False), end="")
        return 0
    names = preset_names()
    width = max(map(len, names)) + 2
    text_width = max(40, shutil.get_terminal_size((110, 24)).columns - width)
    for name in names:
        lines = textwrap.wrap(preset_description(name), text_width, break_on_hyphens=False,
                              break_long_words=False) or [""]
        print(f"{name:<{width}}{lines[0]}")
        for line in lines[1:]:
            print(" " * width + line)
    return 0


def add_import_hf(sub) -> None:
    p = add_verb(sub, "import-hf", "import a Hugging Face translation model (Marian/OPUS-MT, mBART, NLLB, "
                                   "M2M-100) into a docnmt model directory (needs pip install docnmt[hf])")
    p.add_argument("hf_dir", metavar="DIR", help="local Hugging Face directory (config.json, weights, tokenizer)")
    p.add_argument("--save-dir", required=True, help="docnmt model directory to write")
    p.add_argument("--src-lang", help="source language code of a multilingual model (mBART: en_XX, NLLB: eng_Latn, "
                                      "M2M-100: en)")
    p.add_argument("--tgt-lang", help="target language code (a multi-target Marian model: the code of its >>xx<< "
                                      "token)")
    p.add_argument("--force", action="store_true", help="replace a docnmt model in --save-dir")


def cmd_import_hf(args) -> int:
    from ..hf import import_hf
    import_hf(args.hf_dir, args.save_dir, args.src_lang, args.tgt_lang, args.force, log=_stderr)
    return 0


def add_export_hf(sub) -> None:
    p = add_verb(sub, "export-hf", "write a Transformer model (sentence-level or Doc2Doc) as a Hugging Face "
                                   "directory (needs pip install docnmt[hf])")
    _export_args(p, "Hugging Face")


def _export_args(p, kind: str) -> None:
    """The arguments every export verb takes."""
    p.add_argument("model", help="docnmt model directory")
    p.add_argument("out", metavar="DIR", help=f"{kind} directory to write")
    p.add_argument("--checkpoint", help="weights to use instead of MODEL/model.safetensors")
    p.add_argument("--force", action="store_true", help="replace an earlier export in DIR")


def add_export_ct2(sub) -> None:
    p = add_verb(sub, "export-ct2", "write a Transformer model (sentence-level, Doc2Sent or Doc2Doc) as a "
                                    "CTranslate2 model directory (needs pip install docnmt[ct2])")
    _export_args(p, "CTranslate2")
    p.add_argument("--quantization", help="store the weights as int8, int8_float32, float16, bfloat16, ... "
                                          "(default: float32; CTranslate2 can also quantize when it loads)")


def cmd_export_ct2(args) -> int:
    from ..engines.export import export_ct2
    export_ct2(args.model, args.out, args.checkpoint, args.quantization, args.force, log=_stderr)
    return 0


def cmd_export_hf(args) -> int:
    from ..hf import export_hf
    export_hf(args.model, args.out, args.checkpoint, args.force, log=_stderr)
    return 0
