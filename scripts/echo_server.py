#!/usr/bin/env python3
"""The Python peers of the echo comparison (benches/echo): protocol-mode echo
servers, as uvloop's examples/bench/echoserver.py --proto runs them.

    echo_server.py asyncio|uvloop|twisted

Listens on 127.0.0.1 (any free port), prints the address as its first line,
and exits when its standard input closes (so it never outlives the harness).
TCP_NODELAY is set on every connection; `data_received` writes the data back.
"""

import os
import socket
import sys
import threading


def exit_on_stdin_eof():
    def watch():
        while sys.stdin.buffer.read(4096):
            pass
        os._exit(0)

    threading.Thread(target=watch, daemon=True).start()


def run_asyncio(use_uvloop):
    import asyncio

    class Echo(asyncio.Protocol):
        def connection_made(self, transport):
            sock = transport.get_extra_info("socket")
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.transport = transport

        def data_received(self, data):
            self.transport.write(data)

    async def main():
        server = await asyncio.get_running_loop().create_server(Echo, "127.0.0.1", 0)
        host, port = server.sockets[0].getsockname()[:2]
        print(f"{host}:{port}", flush=True)
        await server.serve_forever()

    if use_uvloop:
        import uvloop

        uvloop.run(main())
    else:
        asyncio.run(main())


def run_twisted():
    from twisted.internet import epollreactor

    epollreactor.install()
    from twisted.internet import protocol, reactor

    class Echo(protocol.Protocol):
        def connectionMade(self):
            self.transport.setTcpNoDelay(True)

        def dataReceived(self, data):
            self.transport.write(data)

    factory = protocol.Factory.forProtocol(Echo)
    port = reactor.listenTCP(0, factory, interface="127.0.0.1")
    addr = port.getHost()
    print(f"{addr.host}:{addr.port}", flush=True)
    reactor.run()


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    exit_on_stdin_eof()
    if mode == "asyncio":
        run_asyncio(False)
    elif mode == "uvloop":
        run_asyncio(True)
    elif mode == "twisted":
        run_twisted()
    else:
        sys.exit(f"usage: {sys.argv[0]} asyncio|uvloop|twisted")


if __name__ == "__main__":
    main()
