"""Errors raised by the pure core before any data is touched."""


class MechanismParameterError(ValueError):
    """A mechanism parameter is invalid (e.g. both or neither of ε and ρ, ε <= 0).

    Raised before the input data is read, so the error never depends on private
    data (OpenDP's "data-independent runtime errors").
    """
