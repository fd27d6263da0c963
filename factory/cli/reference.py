"""The command reference of the documentation, written from the parser itself so that it
cannot drift from what `factory COMMAND --help` accepts. argparse formats help only as text for
a terminal; no maintained library renders an argparse parser as Markdown for MkDocs without
running it in a subprocess, so the walk over its actions is here."""

from __future__ import annotations

import argparse

__all__ = ["command_reference"]


def command_reference(parser: argparse.ArgumentParser) -> str:
    """Markdown: for each subcommand a heading, its usage, its description and every argument
    with its help, choices and default."""
    commands = next(action for action in parser._actions  # argparse has no public walk
                    if isinstance(action, argparse._SubParsersAction))
    summaries = {choice.dest: choice.help or "" for choice in commands._choices_actions}
    lines: list[str] = []
    for name, sub in commands.choices.items():
        summary = summaries.get(name, "").rstrip(".")
        lines += [f"## factory {name}", "", summary[:1].upper() + summary[1:] + ".", "",
                  "```", sub.format_usage().strip(), "```", ""]
        if sub.description:
            lines += [" ".join(sub.description.split()), ""]
        lines += [_argument(action, sub.prog) for action in sub._actions
                  if action.help != argparse.SUPPRESS
                  and not isinstance(action, argparse._HelpAction)]
        lines.append("")
    return "\n".join(lines)


def _argument(action: argparse.Action, prog: str) -> str:
    words = ", ".join(f"`{_invocation(action, flag)}`" for flag in action.option_strings
                      ) or f"`{_metavar(action)}`"
    text = " ".join(_expanded_help(action, prog).split())
    notes = []
    if action.choices and isinstance(action.metavar, str):  # else the invocation lists them
        notes.append(f"One of: {', '.join(f'`{choice}`' for choice in action.choices)}.")
    if action.option_strings and action.default not in (None, False, [], argparse.SUPPRESS) \
            and "default" not in text.lower() and action.nargs != 0:
        notes.append(f"Default: `{action.default}`.")
    if notes and not text.endswith("."):
        text += "."
    return " ".join([f"- {words}: {text}", *notes])


def _invocation(action: argparse.Action, flag: str) -> str:
    return flag if action.nargs == 0 else f"{flag} {_metavar(action)}"


def _metavar(action: argparse.Action) -> str:
    if isinstance(action.metavar, str):
        word = action.metavar
    elif action.choices:
        word = "{" + ",".join(str(choice) for choice in action.choices) + "}"
    else:
        word = action.dest.upper() if action.option_strings else action.dest
    return f"{word}..." if action.nargs in ("+", "*") else word


def _expanded_help(action: argparse.Action, prog: str) -> str:
    """The help with its %(default)s-style fields filled by argparse's own expansion (what
    --help prints), which it offers only on its formatter."""
    return argparse.HelpFormatter(prog)._expand_help(action) if action.help else ""
