#!/usr/bin/env python3
"""check_python_wrapper.py — scripts/flash_tutorial.py against the library it wraps, with no
GPU and no PyTorch (ctest -L capi): every C function it declares has the parameter count of
its prototype in flash_tutorial.h, its ctypes structures have the C structs' fields in order,
the decoding problem reaches the C API intact (its refusals through ctypes), the step lists
and supports() agree with the registry, the
listing program names each step's passes, and scripts/train_lm.py chooses its steps. scripts/check_python_api.py checks the rest
(results and gradients) on a GPU.

    tests/check_python_wrapper.py LIBRARY SOURCE_DIR
"""
import os
import re
import subprocess
import sys


def main():
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    lib_path, src = sys.argv[1:]
    os.environ["FLASH_TUTORIAL_LIB"] = lib_path
    sys.path.insert(0, os.path.join(src, "scripts"))
    import flash_tutorial as ft

    passed = failed = 0

    def check(ok, what):
        nonlocal passed, failed
        passed, failed = passed + ok, failed + (not ok)
        print(f"{'ok  ' if ok else 'FAIL'}  {what}")

    # Each prototype's parameter count against the argtypes the wrapper declares.
    header = open(os.path.join(src, "steps", "harness", "flash_tutorial.h")).read()
    lib = ft._load()
    prototypes = re.findall(r"FA_API\s+[\w\s\*]+?\b(fa_\w+)\(([^)]*)\);", header)
    check(len(prototypes) >= 10 and "fa_backward" in dict(prototypes),
          f"flash_tutorial.h: {len(prototypes)} prototypes found, fa_backward among them")
    for name, params in prototypes:
        count = 0 if params.strip() in ("", "void") else params.count(",") + 1
        declared = getattr(lib, name).argtypes
        check(declared is None and count == 0 or declared is not None and len(declared) == count,
              f"{name}: {count} parameters in flash_tutorial.h, "
              f"{'none' if declared is None else len(declared)} declared in flash_tutorial.py")

    # The ctypes structures against the C structs: the same fields in the same order.
    structs = {name: body for body, name in
               re.findall(r"typedef struct \{(.*?)\}\s*(\w+);", header, re.S)}
    for struct, cls in (("fa_problem", ft._Problem), ("fa_decode_problem", ft._DecodeProblem)):
        text = re.sub(r"/\*.*?\*/", "", structs.get(struct, ""), flags=re.S)
        fields = [name for decl in text.split(";") if decl.strip()
                  for name in re.findall(r"\*?\s*(\w+)\s*(?:,|$)",
                                         re.sub(r"^\s*(const\s+)?\w+\s*", "", decl.strip()))]
        declared = [f[0] for f in cls._fields_]
        check(fields == declared, f"{struct}: fields {fields} in flash_tutorial.h, {declared} in "
                                  "flash_tutorial.py")

    # The decoding problem through ctypes: the C API's refusals name what the struct holds, so
    # a field out of place (the lengths or the table above all) would show in the messages.
    import ctypes

    def decode_error(lens, table, **fields):
        base = dict(batch=2, heads_q=8, heads_kv=2, head_dim=64, q_len=1, dtype=1, cache=1,
                    page_size=16, num_pages=4, max_pages=2)
        base.update(fields)
        p = ft._DecodeProblem(**base)
        lens_c = (ctypes.c_int * len(lens))(*lens)
        table_c = (ctypes.c_int * len(table))(*table)
        p.cache_lens = ctypes.cast(lens_c, ctypes.POINTER(ctypes.c_int))
        p.block_table = ctypes.cast(table_c, ctypes.POINTER(ctypes.c_int))
        size = ctypes.c_size_t(0)
        status = lib.fa_decode_workspace_bytes(ft.decode_steps()[0].encode(), ctypes.byref(p), 1,
                                               ctypes.byref(size))
        return lib.fa_last_error().decode() if status else size.value

    check(ft.decode_steps()[:1] == ["12_decode"] and "12_decode" not in ft.steps(),
          f"decode_steps(): {ft.decode_steps()}, apart from steps()")
    ok = decode_error([20, 3], [3, 1, 0, -1])
    check(ok == 4 * 2 * 8 * 1 * 65 + 4 * (2 + 4),
          f"decoding workspace for 1 split, 2 lengths and a 2 x 2 table: {ok} bytes")
    for lens, table, fields, want in (
            ([20, 3], [3, 1, 9, -1], {}, "block_table[1][0] (9) is out of range [0, 4) "
                                         "(num_pages)"),
            ([40, 3], [3, 1, 0, -1], {}, "cache_lens[0] + q_len (40 + 1 = 41) needs 3 pages of "
                                         "16 rows, more than max_pages (2)"),
            ([20, 3], [3, 1, 0, -1], {"q_len": 17}, "q_len (17) must be in [1, 16]"),
            ([20, 3], [3, 1, 0, -1], {"cache": 0, "n_max": 20},
             "cache_lens[0] + q_len (20 + 1 = 21) exceeds n_max (20)"),
            ([20, 3], [3, 1, 0, -1], {"scale": -1.0}, "scale (-1) must be finite and >= 0")):
        got = decode_error(lens, table, **fields)
        check(isinstance(got, str) and got.startswith(want),
              f"the C API refuses through ctypes: {got}")

    all_steps, forward, backward = ft.steps(), ft.forward_steps(), ft.backward_steps()
    check(all_steps == sorted(set(forward) | set(backward), key=all_steps.index) and
          len(all_steps) == lib.fa_num_steps(), "steps() is every step, forward or backward")
    check("04_flash_attention" in forward and "04_flash_attention" not in backward,
          "04_flash_attention: forward only")
    check("10_backward" in backward and "10_backward" not in forward, "10_backward: backward only")
    check(ft.supports("10_backward", "float32") and not ft.supports("10_backward", "bfloat16"),
          "supports(): 10_backward takes fp32, not bf16")
    check(ft.supports("04", "float32", 64) and not ft.supports("04", "float32", 48),
          "supports(): 04 takes d = 64, not 48")
    try:
        ft.supports("10_backward", "float64")
        check(False, "supports() refuses float64")
    except ValueError as e:
        check("dtype (float64) must be float32, float16 or bfloat16" in str(e),
              f"supports() refuses float64: {e}")

    out = subprocess.run([sys.executable, os.path.join(src, "scripts", "flash_tutorial.py")],
                         capture_output=True, text=True)
    lines = {line.split()[0]: line.split()[1] for line in out.stdout.splitlines() if line.strip()}
    check(out.returncode == 0 and lines.get("10_backward") == "backward" and
          lines.get("04_flash_attention") == "forward" and lines.get("12_decode") == "decode",
          "flash_tutorial.py lists each step with its passes")

    # scripts/train_lm.py's choice of steps (no PyTorch: a stand-in for the two attributes it
    # reads, the fp32 dtype and the device's compute capability).
    import types
    import train_lm

    def choice(argv, capability=(9, 0)):
        fake = types.SimpleNamespace(float32="float32", cuda=types.SimpleNamespace(
            get_device_capability=lambda: capability))
        try:
            return train_lm.choose_steps(train_lm.parse_args(argv), fake, ft)
        except SystemExit as e:
            return f"exit {e.code}"

    # bf16: the last backward step that takes bf16, else step 10 in fp32.
    bf16 = [s for s in backward if ft.supports(s, "bfloat16")]
    want = ("09_warp_specialized",) + ((bf16[-1], None) if bf16 else ("10_backward", "float32"))
    check(choice([]) == want, f"train_lm on compute capability 9.0, bf16: {choice([])}")
    check(choice([], (8, 0))[0] == "07_flash_attention_2", "train_lm elsewhere: step 07 forward")
    check(choice(["--dtype", "fp32"]) == ("04_flash_attention", "10_backward", None),
          "train_lm in fp32: steps 04 and 10, no cast")
    check(choice(["--forward-step", "7", "--backward-step", "backward"]) ==
          ("07_flash_attention_2", "10_backward", "float32"),
          "train_lm resolves a step's number and slug")
    check(choice(["--backward-step", "07"]) == "exit 2", "train_lm refuses a forward step as "
          "--backward-step")
    check(choice(["--heads", "16"]) == "exit 2", "train_lm refuses head_dim 32 for step 09")

    print(f"check_python_wrapper: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
