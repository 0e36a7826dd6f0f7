"""Renders chat template cases as transformers' apply_chat_template does in
Python: Jinja2's ImmutableSandboxedEnvironment with trim_blocks,
lstrip_blocks and loopcontrols, transformers' tojson, raise_exception and
strftime_now, and the context messages, tools, documents,
add_generation_prompt, the special tokens map and the extra kwargs.

Usage: python3 reference_jinja2.py < cases.json > rendered.json
(the same files as reference.cjs; strftime_now reads input "now")."""

import datetime
import json
import os
import sys

from jinja2.exceptions import TemplateError
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

SPECIAL = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
           "cls_token", "mask_token", "additional_special_tokens"]


def main():
    data = json.load(sys.stdin)
    now = datetime.datetime.fromisoformat(data["now"].replace("Z", "+00:00"))

    def raise_exception(message):
        raise TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                          separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: now.strftime(fmt)

    configs = {}
    out = []
    for c in data["cases"]:
        try:
            model = c["model"]
            if model not in configs:
                with open(os.path.join(data["models"][model], "tokenizer_config.json")) as f:
                    configs[model] = json.load(f)
            cfg = configs[model]
            source = c.get("chat_template") or cfg["chat_template"]
            if isinstance(source, list):
                named = {t["name"]: t["template"] for t in source}
                source = named["tool_use"] if c.get("tools") is not None and "tool_use" in named else named["default"]
            tokens = {}
            for k in SPECIAL:
                v = cfg.get(k)
                if isinstance(v, dict):
                    v = v.get("content")
                if v:
                    tokens[k] = v
            kwargs = {**tokens, **(c.get("kwargs") or {})}
            text = env.from_string(source).render(
                messages=c["messages"], tools=c.get("tools"), documents=c.get("documents"),
                add_generation_prompt=c["add_generation_prompt"], **kwargs)
            out.append({"text": text})
        except Exception as e:  # the case fails, the others go on
            out.append({"error": f"{type(e).__name__}: {e}"})
    json.dump(out, sys.stdout, ensure_ascii=False)


main()
