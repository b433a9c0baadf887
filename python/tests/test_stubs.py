"""The type stubs (streamkit/__init__.pyi) declare every public name with the runtime's parameters,
and every public name has a docstring."""

import ast
import inspect
import pathlib

import streamkit

STUB = pathlib.Path(streamkit.__file__).with_name("__init__.pyi")


def stub_parameters():
    """{qualified name: [(parameter, kind)]} of the stub's functions and methods."""
    found = {}

    def visit(body, prefix):
        for node in body:
            if isinstance(node, ast.ClassDef):
                found[prefix + node.name] = None
                visit(node.body, prefix + node.name + ".")
            elif isinstance(node, ast.FunctionDef):
                a = node.args
                found[prefix + node.name] = ([(p.arg, "positional") for p in a.posonlyargs + a.args]
                                             + ([("*" + a.vararg.arg, "var")] if a.vararg else [])
                                             + [(p.arg, "keyword") for p in a.kwonlyargs]
                                             + ([("**" + a.kwarg.arg, "var")] if a.kwarg else []))

    visit(ast.parse(STUB.read_text()).body, "")
    return found


def runtime_parameters(function):
    kinds = {inspect.Parameter.KEYWORD_ONLY: "keyword", inspect.Parameter.VAR_POSITIONAL: "var",
             inspect.Parameter.VAR_KEYWORD: "var"}
    prefix = {inspect.Parameter.VAR_POSITIONAL: "*", inspect.Parameter.VAR_KEYWORD: "**"}
    return [(prefix.get(p.kind, "") + p.name, kinds.get(p.kind, "positional"))
            for p in inspect.signature(function).parameters.values()]


def test_every_public_name_is_in_the_stub_with_its_parameters():
    stub = stub_parameters()
    for name in streamkit.__all__:
        value = getattr(streamkit, name)
        if inspect.isclass(value) and not issubclass(value, BaseException):
            assert name in stub, name
            for attribute, member in vars(value).items():
                if attribute.startswith("_") and attribute not in ("__init__", "__len__", "__call__"):
                    continue
                if inspect.isfunction(member):
                    assert f"{name}.{attribute}" in stub, f"{name}.{attribute} is missing from the stub"
                    assert stub[f"{name}.{attribute}"] == runtime_parameters(member), f"{name}.{attribute}"
                elif isinstance(member, property):
                    assert f"{name}.{attribute}" in stub, f"{name}.{attribute} is missing from the stub"
        elif inspect.isfunction(value):
            assert stub.get(name) == runtime_parameters(value), name
        elif callable(value) and not inspect.isclass(value):  # compiled functions
            assert name in stub, name


def test_every_public_name_has_a_docstring():
    for name in streamkit.__all__:
        value = getattr(streamkit, name)
        if callable(value):
            assert inspect.getdoc(value), f"{name} has no docstring"
        if inspect.isclass(value):
            for attribute, member in vars(value).items():
                if not attribute.startswith("_") and (inspect.isfunction(member) or isinstance(member, property)):
                    assert inspect.getdoc(member), f"{name}.{attribute} has no docstring"
