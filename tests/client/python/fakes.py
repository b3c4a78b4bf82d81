"""Stand-ins the client's unit tests share: a grpc.RpcError with a chosen code and details."""
import grpc


class FakeRpcError(grpc.RpcError):
    def __init__(self, code, details):
        self._code, self._details = code, details

    def code(self):
        return self._code

    def details(self):
        return self._details
