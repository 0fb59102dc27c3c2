"""The baseline of the accelerator bench: HF transformers `generate` in bf16 (or f32: the CPU
bench tools/bench/generate/real_size.py), in a process of its own (torch and JAX never share an
interpreter; a machine without torch runs the rlx side alone).

    python hf_side.py CHECKPOINT_DIR [DTYPE]     # DTYPE: bfloat16 (default) or float32

Prints one JSON line about itself once the checkpoint is loaded, then answers each request line
({"prompts": [[ids]], "new": N, "repeats": R}) with one JSON line: the best wall seconds of
`generate` with N new tokens and with 1 (prefill + first token), greedy, every row exactly N
tokens (min_new_tokens), and the tokens drawn. Not imported by anything: torch lives here only.
"""

from __future__ import annotations

import json
import sys
import time

import torch
import transformers
from transformers import AutoModelForCausalLM


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _dtype_kwarg() -> str:
    """transformers renamed from_pretrained's `torch_dtype` to `dtype` in 4.56."""
    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    return "dtype" if (major, minor) >= (4, 56) else "torch_dtype"


def main() -> int:
    ckpt = sys.argv[1]
    dtype = getattr(torch, sys.argv[2] if len(sys.argv) > 2 else "bfloat16")
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = AutoModelForCausalLM.from_pretrained(ckpt, **{_dtype_kwarg(): dtype})
    model = model.to(device).eval()
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    info = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "device": name,
        "dtype": str(model.dtype).removeprefix("torch."),
        "attn": model.config._attn_implementation,
        "threads": torch.get_num_threads(),
    }
    print(json.dumps(info), flush=True)

    def generate(ids: torch.Tensor, new: int) -> tuple[float, list[list[int]]]:
        _sync(device)
        t0 = time.perf_counter()
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=new,
            min_new_tokens=new,
            do_sample=False,
            num_beams=1,
            pad_token_id=0,
        )
        _sync(device)
        seconds = time.perf_counter() - t0
        return seconds, out[:, ids.shape[1] :].tolist()

    with torch.inference_mode():
        for line in sys.stdin:
            req = json.loads(line)
            ids = torch.tensor(req["prompts"], dtype=torch.long, device=device)
            new, repeats = int(req["new"]), int(req["repeats"])
            generate(ids, min(new, 8))  # warm-up: kernels, cuBLAS heuristics, the cache
            full_s, tokens = min(generate(ids, new) for _ in range(repeats))
            one_s = min(generate(ids, 1)[0] for _ in range(repeats))
            if device == "cuda":
                torch.cuda.empty_cache()  # JAX shares the GPU with this process
            print(json.dumps({"full_s": full_s, "one_s": one_s, "tokens": tokens}), flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # the bench's time limit reaches the whole process group
        sys.exit(130)
