"""The model kinds, one package each (see ``base.Kind`` and ``registry``)."""
