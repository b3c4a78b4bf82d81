"""Stand-ins the client's unit tests share: a grpc.RpcError with a chosen code and details."""
import grpc


class FakeRpcError(grpc.RpcError):
    def __init__(self, code, details, trailing=()):
        self._code, self._details, self._trailing = code, details, tuple(trailing)

    def trailing_metadata(self):
        return self._trailing

    def code(self):
        return self._code

    def details(self):
        return self._details
