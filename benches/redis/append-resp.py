"""Writes, for benches/redis/append-cost.sh, the Redis protocol of either
the state a session leaves after create.lua and bounds.lua (a live session,
its stream's state, one follower: a compact member) for SESSIONS sessions,
or N appends spread over them in turn, in the layout asked:

    append-resp.py setup SESSIONS
    append-resp.py append.lua|floor-append.lua SESSIONS N SHA

Keys and arguments as the server sends them (one server, no replicas: the
ring in the script); a 150-byte notification an event."""
import sys

MSG = ('{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info",'
       '"data":"tick 000123 from the emit tool, about a hundred and fifty bytes"}}')
NONCE = '123456789012'
OUT = sys.stdout.buffer


def cmd(*args):
    parts = [b'*%d\r\n' % len(args)]
    for a in args:
        a = str(a).encode()
        parts.append(b'$%d\r\n%s\r\n' % (len(a), a))
    OUT.write(b''.join(parts))


def session(i):
    # Session ids are 64 hex digits.
    return 'mcpr:{%064x}' % (i * 2654435761 % (1 << 255))


def main():
    what, sessions = sys.argv[1], int(sys.argv[2])
    if what == 'setup':
        cmd('XADD', 'mcpr:wake:{%s}' % NONCE, '*', 'x', '1')
        for i in range(sessions):
            s = session(i)
            # `w`: the follower in the session's hash, as the floor reads it.
            cmd('HSET', s, 'e', 0, 'c', 1, 'r', 1, 'a', 1, 'x', 1, 'w', NONCE + '0')
            cmd('HSET', s + ':st:0', 'h', 0, 'f', 1, 'c', 0)
            cmd('SADD', s + ':f', NONCE + '0')
        return
    n, sha = int(sys.argv[3]), sys.argv[4]
    for k in range(n):
        s = session(k % sessions)
        if what == 'append.lua':
            # KEYS: session, stream state, events, pins, once, index,
            # followers; ARGV: stream 0, now, no count limit, no floor,
            # committed at the append, no key, no fence, ring, not the
            # follower's instance (`me`: it would not be rung), the message.
            cmd('EVALSHA', sha, 7, s, s + ':st:0', s + ':ev:0', s + ':pin', s + ':once',
                s + ':rs', s + ':f', 0, 1700000000000, 1000000000, 0, 1, '', '', 1, '', MSG)
        else:
            cmd('EVALSHA', sha, 2, s, s + ':ev:0', 1700000000000, MSG)


main()
