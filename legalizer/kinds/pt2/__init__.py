"""``torch.export`` programs (``.pt2``): the record (``kind``), the calls the IR keeps
(``records``), the reader (``read``) and the behaviour of the main job (``format``)."""
