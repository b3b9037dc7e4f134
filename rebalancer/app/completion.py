"""Shell completion scripts, generated from the command line's own parser (so they never drift from it).

The bash script completes commands, each command's options, and the choices of options and arguments
that have them; elsewhere it leaves the word to the shell's file name completion. The zsh script is the
same function loaded through zsh's ``bashcompinit``.
"""

from __future__ import annotations

import argparse
import shlex

_FUNCTION = "_rebalancer"


def _words(parser: argparse.ArgumentParser) -> tuple[list[str], dict[str, list[str]], list[str]]:
    """Its option strings; the choices of each option that takes a value (empty: any value); and the choices
    of its first positional argument."""
    options: list[str] = []
    values: dict[str, list[str]] = {}
    positional: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            continue
        if not action.option_strings:
            positional = positional or [str(c) for c in action.choices or ()]
            continue
        options += action.option_strings
        if action.nargs != 0:
            for option in action.option_strings:
                values[option] = [str(c) for c in action.choices or ()]
    return options, values, positional


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _quote(words: list[str]) -> str:
    return shlex.quote(" ".join(words))


def bash_script(parser: argparse.ArgumentParser) -> str:
    commands = _commands(parser)
    top_options, top_values, _ = _words(parser)
    value_cases, word_cases = [], []
    takes_value = set(top_values)
    for name, command in {"": parser, **commands}.items():
        options, values, positional = _words(command) if name else (top_options, top_values, [])
        takes_value |= set(values)
        value_cases += [
            f"            {shlex.quote(f'{name}:{option}')}) words={_quote(choices)} ;;"
            for option, choices in values.items()
            if choices
        ]
        first = [*commands] if not name else positional
        word_cases.append(f"        {shlex.quote(name)}) options={_quote(options)}; first={_quote(first)} ;;")
    lines = [
        f"# {parser.prog} completion for bash: source <({parser.prog} completion bash)",
        f"{_FUNCTION}() {{",
        '    local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}"',
        "    local cmd='' words='' options='' first='' i",
        f"    local takes_value={_quote(sorted(takes_value))}",
        "    for ((i = 1; i < COMP_CWORD; i++)); do",
        '        case "${COMP_WORDS[i]}" in',
        "            -*=*) ;;",
        '            -*) [[ " $takes_value " == *" ${COMP_WORDS[i]} "* ]] && ((i++)) ;;',
        '            *) cmd="${COMP_WORDS[i]}"; break ;;',
        "        esac",
        "    done",
        "    COMPREPLY=()",
        '    if [[ "$prev" == -* && " $takes_value " == *" $prev "* ]]; then',
        '        case "$cmd:$prev" in',
        *value_cases,
        "            *) return 0 ;;",
        "        esac",
        '        COMPREPLY=($(compgen -W "$words" -- "$cur"))',
        "        return 0",
        "    fi",
        '    case "$cmd" in',
        *word_cases,
        "        *) return 0 ;;",
        "    esac",
        '    if [[ "$cur" == -* ]]; then',
        '        COMPREPLY=($(compgen -W "$options" -- "$cur"))',
        '    elif [[ -n "$first" ]]; then',
        '        COMPREPLY=($(compgen -W "$first" -- "$cur"))',
        "    fi",
        "    return 0",
        "}",
        f"complete -o bashdefault -o default -F {_FUNCTION} {parser.prog}",
    ]
    return "\n".join(lines) + "\n"


def completion_script(parser: argparse.ArgumentParser, shell: str) -> str:
    """The completion script of ``parser`` (with sub-commands) for ``shell``: bash or zsh."""
    script = bash_script(parser)
    if shell == "bash":
        return script
    prefix = [
        f"#compdef {parser.prog}",
        f"# {parser.prog} completion for zsh: source <({parser.prog} completion zsh)",
        "(( $+functions[compdef] )) || { autoload -U compinit && compinit; }",
        "autoload -U +X bashcompinit && bashcompinit",
    ]
    return "\n".join(prefix) + "\n" + script
