"""``torch.export`` programs (``.pt2``): the record (``kind``), the calls the IR keeps
(``records``) and the behaviour of the main job (``format``)."""
