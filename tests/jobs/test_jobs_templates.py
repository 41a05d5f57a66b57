"""The plain template, command fields, the registry and input checking shared by all templates."""

from __future__ import annotations

import json

import pytest

from jupyter_gpuhive.jobs import TEMPLATES, GpuSlot, TemplateError, command_fields, get_template

plain = get_template("plain")


def test_registry_names():
    assert set(TEMPLATES) == {"plain", "pytorch", "tensorflow", "tf-clusterspec"}
    for name, template in TEMPLATES.items():
        assert template.name == name
        assert get_template(name) is template


def test_unknown_template_lists_known_names():
    with pytest.raises(TemplateError, match=r"unknown job template 'torch' \(known: plain, "):
        get_template("torch")


def test_descriptions_are_json_and_examples_render(hosts):
    for template in TEMPLATES.values():
        description = json.loads(json.dumps(template.describe()))
        assert description["name"] == template.name
        assert set(description["fields"]) >= {"job", "task", "host", "gpus"}
        variables = {"lr": "0.1"}
        tasks = template.render("example", template.example, hosts(2, 2), variables)
        assert tasks
        assert all("0.1" in t.command for t in tasks)


def test_plain_one_task_per_host_with_builtins(hosts):
    tasks = plain.render(
        "exp",
        "run {job} {task}/{ntasks} on {host} {address} {gpus} {gpu_indices} {ngpus}",
        hosts(2, 1),
    )
    assert [t.command for t in tasks] == [
        "run exp 0/2 on gpu0 10.0.0.1 GPU-gpu0-0000-aaaa-bbbb-cccc,GPU-gpu0-0001-aaaa-bbbb-cccc "
        "0,1 2",
        "run exp 1/2 on gpu1 10.0.0.2 GPU-gpu1-0000-aaaa-bbbb-cccc 0 1",
    ]
    assert [t.index for t in tasks] == [0, 1]
    assert all(t.job == "exp" for t in tasks)


def test_plain_per_gpu(hosts):
    tasks = plain.render("exp", "run {task}", hosts(2, 1), options={"per_gpu": True})
    assert [(t.host, t.command, len(t.gpus)) for t in tasks] == [
        ("gpu0", "run 0", 1),
        ("gpu0", "run 1", 1),
        ("gpu1", "run 2", 1),
    ]


def test_cuda_env_uses_uuids_including_mig(hosts):
    [task] = plain.render("j", "t", hosts(2, mig=True))
    assert task.env["CUDA_VISIBLE_DEVICES"] == (
        "MIG-gpu0-0000-aaaa-bbbb-cccc,MIG-gpu0-0001-aaaa-bbbb-cccc"
    )
    assert task.env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert task.visible_devices == task.env["CUDA_VISIBLE_DEVICES"]


def test_gpu_indices_above_nine_are_not_mangled():
    slots = [GpuSlot("big", "10.0.0.1", i, f"GPU-{i}") for i in (10, 11)]
    [task] = plain.render("j", "t {gpu_indices}", [("big", "10.0.0.1", slots)])
    assert task.command == "t 10,11"
    assert task.env["CUDA_VISIBLE_DEVICES"] == "GPU-10,GPU-11"


def test_variables_are_quoted_and_numbers_accepted(hosts):
    [task] = plain.render("j", "t {a} {b} {c}", hosts(1), {"a": "x y", "b": 3, "c": 0.5})
    assert task.command == "t 'x y' 3 0.5"
    assert task.variables["a"] == "x y"


def test_unknown_field_is_named(hosts):
    with pytest.raises(TemplateError, match=r"unknown field 'lr' in the command"):
        plain.render("j", "train --lr {lr}", hosts(1))


def test_several_unknown_fields_are_all_named(hosts):
    with pytest.raises(TemplateError, match=r"unknown fields 'lr', 'bs'"):
        plain.render("j", "train --lr {lr} --bs {bs} {lr}", hosts(1))


def test_literal_braces(hosts):
    [task] = plain.render("j", "awk '{{print $1}}' {f}", hosts(1), {"f": "a b"})
    assert task.command == "awk '{print $1}' 'a b'"


@pytest.mark.parametrize(
    ("command", "message"),
    [
        ("echo {", "bad command template"),
        ("echo }", "bad command template"),
        ("echo {}", "empty field"),
        ("echo {lr!r}", "format specs and conversions"),
        ("echo {lr:>5}", "format specs and conversions"),
        ("echo {lr.real}", "unknown field 'lr.real'"),
        ("echo {0}", "unknown field '0'"),
    ],
)
def test_bad_command_templates(hosts, command, message):
    with pytest.raises(TemplateError, match=message):
        plain.render("j", command, hosts(1), {"lr": "1"})


def test_command_fields():
    assert command_fields("a {x} {{y}} {z} {x}") == ["x", "z"]


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({"host": "x"}, "would hide"),
        ({"not-ok": "x"}, "not an identifier"),
        ({"x": None}, "must be a string or number"),
        ({"x": True}, "must be a string or number"),
        ({"x": "a\0b"}, "NUL"),
    ],
)
def test_bad_variables(hosts, variables, message):
    with pytest.raises(TemplateError, match=message):
        plain.render("j", "t", hosts(1), variables)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"CUDA_VISIBLE_DEVICES": "0"}, "set by the template"),
        ({"A=B": "x"}, "not valid"),
        ({"A": 1}, "must be a string"),
    ],
)
def test_bad_env(hosts, env, message):
    with pytest.raises(TemplateError, match=message):
        plain.render("j", "t", hosts(1), env=env)


def test_user_env_and_workdir_reach_every_task(hosts):
    tasks = plain.render("j", "t", hosts(1, 1), env={"A": "1"}, workdir="/data/run")
    assert all(t.env["A"] == "1" and t.workdir == "/data/run" for t in tasks)


def test_bad_hosts(hosts):
    [one] = hosts(1)
    with pytest.raises(TemplateError, match="no hosts"):
        plain.render("j", "t", [])
    with pytest.raises(TemplateError, match="listed twice"):
        plain.render("j", "t", [one, one])
    with pytest.raises(TemplateError, match="listed under"):
        plain.render("j", "t", [("other", one[1], one[2])])


def test_unknown_option(hosts):
    with pytest.raises(TemplateError, match="unknown option chief for the plain template"):
        plain.render("j", "t", hosts(1), options={"chief": True})


def test_the_preemptible_how_tos_shell_line_pastes_and_the_error_says_how(hosts):
    """#48 item 7: the how-to's command form of its trap line is accepted as it is written,
    and the plain shell form is refused with the doubled-brace form to write instead."""
    import re
    from pathlib import Path

    doc = (Path(__file__).parents[2] / "docs/how-to/preemptible.md").read_text()
    [line] = re.findall(r"`(trap [^`]*\$\{\{[^`]*)`", doc)
    [task] = plain.render("j", line, hosts(1))
    assert task.command == """trap 'stop=yes' "${GPUHIVE_PREEMPT_SIGNAL#SIG}\""""
    shell = """trap 'stop=yes' "${GPUHIVE_PREEMPT_SIGNAL#SIG}\""""
    with pytest.raises(TemplateError) as refused:
        plain.render("j", shell, hosts(1))
    assert "${{GPUHIVE_PREEMPT_SIGNAL#SIG}}" in str(refused.value)
    assert "literal brace" in str(refused.value)
