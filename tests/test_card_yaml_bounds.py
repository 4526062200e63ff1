"""A card header is read within bounds (dataset/cardfile.load_yaml): no alias, no key given twice,
no nesting past MAX_YAML_DEPTH, no more than MAX_HEADER_CHARS. A "billion laughs" header makes
diff, validate, recheck and push --tag end with one error naming the card, at once."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import yaml
from click.testing import CliRunner

from orandcar_builder.cli import main
from orandcar_builder.dataset.cardfile import (
    MAX_YAML_DEPTH,
    CardFormatError,
    YamlRefused,
    dump_header,
    load_yaml,
    split_card,
)
from orandcar_builder.dataset.validate import validate_folder

from .conftest import REPO
from .test_publish import folder_v1, folder_v2, hub  # noqa: F401 (fixtures)


def bomb(levels: int = 9, fan: int = 10, value: str = "[lol]") -> str:
    """Anchors nested ``levels`` deep, ``fan`` aliases each: fan**levels values once expanded."""
    lines = [f"l0: &l0 {value}"]
    for level in range(1, levels):
        lines.append(f"l{level}: &l{level} [{', '.join([f'*l{level - 1}'] * fan)}]")
    return "\n".join(lines) + "\n"


REFUSED = [
    (bomb(), "alias"),
    (bomb(value="{a: lol}"), "alias"),  # mappings as the shared values
    ("base: &b {a: 1}\nother:\n  <<: *b\n  c: 2\n", "alias"),  # a merge key needs an alias too
    ("orandcar_build:\n  x: &x hello\n  y: *x\n", "alias"),  # one scalar alias
    ("a: 1\nb: 2\na: 3\n", "twice"),
    ("a:\n  b: 1\n  b: 2\n", "twice"),
    ("x: " + "[" * 5000 + "]" * 5000 + "\n", "deeper"),  # flow nesting past the stack
    ("x: " + "{a: " * (MAX_YAML_DEPTH + 1) + "1" + "}" * (MAX_YAML_DEPTH + 1) + "\n", "deeper"),
    ("".join("  " * i + f"k{i}:\n" for i in range(MAX_YAML_DEPTH + 2)) + "  " * (MAX_YAML_DEPTH + 2) + "v\n", "deeper"),
]


@pytest.mark.parametrize("text,word", REFUSED)
def test_load_yaml_refuses_aliases_repeated_keys_and_deep_nesting(text, word):
    start = time.monotonic()
    with pytest.raises(YamlRefused, match=word):
        load_yaml(text)
    assert time.monotonic() - start < 5


def test_load_yaml_refuses_an_overlong_header_unparsed():
    with pytest.raises(YamlRefused, match="characters long"):
        load_yaml("a: b\n" * 10, max_chars=20)


def test_load_yaml_reads_what_safe_load_reads_otherwise():
    text = "a: &unused 1\nb: [1, {c: d}]\nc: {x: y}\n"
    assert load_yaml(text) == yaml.safe_load(text)


def test_dump_header_writes_shared_values_out_and_reads_back_equal():
    shared = {"rule": "alnum", "list": [1, 2]}
    header = {"a": shared, "b": shared, "c": [shared, shared]}
    text = dump_header(header)
    assert "&" not in text and "*" not in text
    assert load_yaml(text) == header


def bombed(folder, extra: str = bomb() + "orandcar_laughs: *l8\n") -> None:
    readme = folder / "README.md"
    text = readme.read_text(encoding="utf-8")
    readme.write_text("---\n" + extra + text[len("---\n"):], encoding="utf-8")


def test_split_card_names_the_file_and_the_line(tmp_path):
    with pytest.raises(CardFormatError, match=r"X/README.md: the YAML header uses an alias \(\*l0, line 3\)"):
        split_card("---\n" + bomb() + "---\nbody\n", source="X/README.md")


def test_validate_reports_a_bombed_card_as_one_problem(sample_copy):
    bombed(sample_copy)
    start = time.monotonic()
    problems = validate_folder(sample_copy)
    assert time.monotonic() - start < 60
    card = [p for p in problems if p.startswith("README.md")]
    assert len(card) == 1 and "alias" in card[0], problems


def test_diff_of_a_bombed_card_is_one_error_at_once(sample_copy, built_sample, tmp_path):
    """In a process of its own, with its memory bounded: without the bound this hangs and grows."""
    bombed(sample_copy)
    script = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))\n"
        "from orandcar_builder.cli import main\n"
        "sys.argv = ['orandcar', 'diff', sys.argv[1], sys.argv[2]]\n"
        "main()\n"
    )
    for old, new in ((sample_copy, built_sample), (built_sample, sample_copy)):
        res = subprocess.run([sys.executable, "-c", script, str(old), str(new)], capture_output=True, text=True,
                             timeout=120, cwd=REPO)
        assert res.returncode == 2, res.stderr
        errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and "README.md" in errors[0] and "alias" in errors[0], res.stderr
        assert "Traceback" not in res.stderr


def test_recheck_of_a_bombed_card_is_one_error(sample_copy):
    bombed(sample_copy, "orandcar_x: &x [1]\norandcar_y: *x\n")
    res = CliRunner().invoke(main, ["recheck", str(sample_copy)])
    assert res.exit_code == 2, res.output
    assert "README.md" in res.output and "alias" in res.output


def test_a_card_that_gives_a_key_twice_is_a_problem(sample_copy):
    bombed(sample_copy, "pretty_name: one\npretty_name: two\n")
    problems = validate_folder(sample_copy)
    assert any("pretty_name" in p and "twice" in p for p in problems), problems


def test_push_tag_refuses_a_bombed_card_of_the_previous_tag(hub, folder_v1, folder_v2):  # noqa: F811 (fixtures)
    """``push --tag`` reads the previous tag's card from the Hub: a hostile one is one error."""
    from huggingface_hub import HfApi

    from orandcar_builder.errors import OrandCarError

    from .test_publish import REPO, quiet_push

    quiet_push(folder_v1)
    api = HfApi()
    card = (folder_v1 / "README.md").read_text(encoding="utf-8")
    hostile = "---\n" + bomb() + "orandcar_build: *l8\n" + card[len("---\n"):].replace("orandcar_build:", "old_build:", 1)
    api.upload_file(path_or_fileobj=hostile.encode("utf-8"), path_in_repo="README.md", repo_id=REPO,
                    repo_type="dataset")
    api.create_tag(REPO, tag="v1.0", repo_type="dataset")
    start = time.monotonic()
    with pytest.raises(OrandCarError, match=r"README.md: the YAML header uses an alias"):
        quiet_push(folder_v2, tag="v2.0")
    assert time.monotonic() - start < 60
    assert "v2.0" not in hub.repo(REPO).tags


def test_an_overlong_card_header_is_a_problem_unparsed(sample_copy):
    bombed(sample_copy, "orandcar_pad: " + "x" * (2 << 20) + "\n")
    problems = validate_folder(sample_copy)
    card = [p for p in problems if p.startswith("README.md")]
    assert len(card) == 1 and "characters long" in card[0], problems
