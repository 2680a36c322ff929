"""The one exception type the storage layer raises for bad input or a damaged store."""


class StoreError(ValueError):
    """Bad input or a damaged store; the message names file, row range and what was expected.

    A ValueError subclass so callers that validate arguments generically still catch it.
    """
