"""docs/cli.md documents every subcommand and every flag the parsers accept."""

from pathlib import Path

from refsim.cli import make_parser

DOC = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()


def test_every_subcommand_and_flag_is_documented():
    parser = make_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    assert len(sub.choices) >= 9
    missing = []
    for name, p in sub.choices.items():
        if f"## `refsim {name}`" not in DOC:
            missing.append(name)
        parsers = [(name, p)]
        for action in p._actions:
            if action.__class__.__name__ == "_SubParsersAction":
                for sub_name, sp in action.choices.items():
                    if f"### `refsim {name} {sub_name}`" not in DOC:
                        missing.append(f"{name} {sub_name}")
                    parsers.append((f"{name} {sub_name}", sp))
        for label, pp in parsers:
            for action in pp._actions:
                for flag in action.option_strings:
                    if flag not in DOC:
                        missing.append(f"{label} {flag}")
    assert not missing, f"regenerate docs/cli.md (python tools/make_cli_doc.py): {missing}"
