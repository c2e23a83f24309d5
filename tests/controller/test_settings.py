"""The settings object is the one source of truth for configuration, README included."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.settings import README_BEGIN, README_END, Settings, markdown_table, readme_with_table

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_settings_table_is_current():
    text = README.read_text()
    assert readme_with_table(text) == text, (
        "README.md's settings table differs from controller/settings.py: run `python -m controller.settings --write`"
    )


def test_every_setting_is_in_the_table_with_its_description():
    table = markdown_table()
    for name, field in Settings.model_fields.items():
        assert field.description, f"setting {name} has no description"
        assert field.description in table


def test_the_table_is_rewritten_between_the_markers_only():
    stale = f"intro\n{README_BEGIN}\n| old | table |\n{README_END}\nrest\n"
    fresh = readme_with_table(stale)
    assert fresh.startswith("intro\n") and fresh.endswith("rest\n")
    assert "| old | table |" not in fresh and markdown_table() in fresh


def test_a_readme_without_markers_is_an_error_not_a_silent_pass():
    with pytest.raises(ValueError, match="markers"):
        readme_with_table("no table here")
