"""Code extraction from model replies: every reply shape kbench meets."""

from __future__ import annotations

import textwrap

import pytest

from kernelbench_harness.prompts import extract_code, find_code_blocks

MODULE = textwrap.dedent("""\
    import torch
    import torch.nn as nn


    class ModelNew(nn.Module):
        def forward(self, x):
            return x * 2
""")

FENCE = "```"


def test_single_python_block_with_prose_around():
    reply = f"Here is a fused kernel.\n\n{FENCE}python\n{MODULE}{FENCE}\n\nIt should be ~2x faster."
    assert extract_code(reply) == MODULE


def test_prefers_last_python_block_defining_modelnew():
    draft = MODULE.replace("x * 2", "x * 3")
    reply = (f"First the CUDA source:\n{FENCE}cpp\n__global__ void k() {{}}\n{FENCE}\n"
             f"A first try:\n{FENCE}python\n{draft}{FENCE}\n"
             f"A helper:\n{FENCE}python\ndef helper():\n    return 1\n{FENCE}\n"
             f"Final answer:\n{FENCE}python\n{MODULE}{FENCE}\n"
             f"Usage:\n{FENCE}python\nm = ModelNew()\n{FENCE}\n")
    assert extract_code(reply) == MODULE


def test_block_without_language_tag():
    assert extract_code(f"Answer:\n{FENCE}\n{MODULE}{FENCE}\n") == MODULE


def test_unterminated_fence_runs_to_end():
    reply = f"Sure.\n{FENCE}python\n{MODULE}"
    assert extract_code(reply) == MODULE


def test_closed_block_preferred_over_cut_off_one():
    cut = MODULE.replace("return x * 2\n", "return x *")
    reply = f"{FENCE}python\n{MODULE}{FENCE}\nBetter version:\n{FENCE}python\n{cut}"
    assert extract_code(reply) == MODULE


def test_bare_reply_that_is_only_code():
    assert extract_code(MODULE) == MODULE


def test_bare_code_with_prose_before_and_after():
    reply = "Here is the solution:\n" + MODULE + "\nThis fuses the multiply.\n"
    assert extract_code(reply) == MODULE


def test_no_code_at_all():
    assert extract_code("I cannot help with that request, sorry.") is None
    assert extract_code("") is None
    assert extract_code(None) is None
    assert extract_code("   \n  ") is None


def test_prose_mentioning_modelnew_is_not_code():
    assert extract_code("You should define class ModelNew with a custom kernel.") is None


def test_think_block_is_set_aside():
    draft = MODULE.replace("x * 2", "x + x  # draft")
    reply = f"<think>Let me try\n{FENCE}python\n{draft}{FENCE}\nhmm</think>\nFinal:\n{FENCE}python\n{MODULE}{FENCE}"
    assert extract_code(reply) == MODULE


def test_mis_tagged_block_holding_python_modelnew():
    assert extract_code(f"{FENCE}cuda\n{MODULE}{FENCE}") == MODULE


def test_tilde_fences_and_longer_fences_with_inner_backticks():
    inner = MODULE + 'DOC = """\n```\nnot a fence end\n```\n"""\n'
    assert extract_code(f"~~~python\n{MODULE}~~~") == MODULE
    assert extract_code(f"````python\n{inner}````\n") == inner


def test_python_block_without_modelnew_is_returned_when_nothing_better():
    code = "import torch\nx = 1\n"
    assert extract_code(f"{FENCE}python\n{code}{FENCE}") == code


def test_only_non_python_blocks_gives_none():
    assert extract_code(f"{FENCE}cpp\nint main() {{ return 0; }}\n{FENCE}\n{FENCE}bash\nnvcc a.cu\n{FENCE}") is None


@pytest.mark.parametrize("tag", ["python", "py", "Python3", "{.python}"])
def test_language_tag_variants(tag):
    assert extract_code(f"{FENCE}{tag}\n{MODULE}{FENCE}") == MODULE


def test_find_code_blocks_reports_closed_state_and_lang():
    blocks = find_code_blocks(f"{FENCE}cpp\na\n{FENCE}\ntext\n{FENCE}\nb")
    assert [(b.lang, b.code, b.closed) for b in blocks] == [("cpp", "a", True), ("", "b", False)]
