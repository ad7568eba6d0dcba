"""Exporters: write the IR back out."""

from typing import Callable, Dict, TypeVar

F = TypeVar("F", bound=Callable)


def registrar(table: Dict[str, Callable]) -> Callable[..., Callable[[F], F]]:
    """A decorator factory: ``@register("Add", "Sub")`` puts the function in ``table``
    under each op name (the emitters' per-op lowering tables)."""
    def register(*ops: str) -> Callable[[F], F]:
        def deco(fn: F) -> F:
            for op in ops:
                table[op] = fn
            return fn
        return deco
    return register
