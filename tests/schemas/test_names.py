"""Safe names: what may become a file or directory name."""

import pytest

from schemas.errors import ParameterError
from schemas.names import check_name, check_relative_path, is_safe_name
from schemas.policy import load_policy

SAFE = ["a", "rc-tracks-0123456789abcdef", "v1.2", "release_2024-01-01", "A" * 128, "0"]
UNSAFE = ["", ".", "..", "../escaped", "/abs/path", "a/b", ".hidden", "-rf", "_x", "a..b",
          "a\\b", "a b", "a\0b", "ｔracks", "é", "a\n", "A" * 129, None, 3, "x/..", "~root"]


@pytest.mark.parametrize("name", SAFE)
def test_safe_names_pass(name):
    assert is_safe_name(name) and check_name(name, "--release-id") == name


@pytest.mark.parametrize("name", UNSAFE)
def test_unsafe_names_are_refused_naming_the_option_and_the_rule(name):
    assert not is_safe_name(name)
    with pytest.raises(ParameterError, match=r"--release-id .* is not a safe name.*no '/'"):
        check_name(name, "--release-id")


def test_relative_paths_are_checked_part_by_part():
    assert check_relative_path("plots/private_curves.png", "file") == ("plots",
                                                                       "private_curves.png")
    for bad in ("", "/etc/passwd", "plots/../../x", "plots//x", "plots/.x", "a/"):
        with pytest.raises(ParameterError, match="not a safe name"):
            check_relative_path(bad, "file")


@pytest.mark.parametrize("domain", ["ｔracks", "tracks.x", "_tracks", "-tracks", "a" * 129])
def test_policy_refuses_a_domain_name_outside_the_alphabet(domain, tmp_path):
    from schemas.errors import PolicyError

    path = tmp_path / "policy.toml"
    path.write_text(f'[domains."{domain}"]\nkind = "curves"\nnotion = "gp"\ncap = "1"\n'
                    'time_unit = "s"\nvalue_columns = ["x"]\nvalue_unit = "m"\n',
                    encoding="utf-8")
    with pytest.raises(PolicyError, match="become file names"):
        load_policy(path)
