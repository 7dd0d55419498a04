#!/usr/bin/env python3
# Peak resident memory of a real ctxd daemon under the hostile requests of
# docs/operating.md "Limits": python3 scripts/hostile-rss.py blocks|text|text30|words30|slow
# (CTXD_BIN names the binary; an upstream answering 401 is started here).
import http.server, threading, socket, subprocess, os, sys, time, tempfile, json, re, shutil

class Up(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        n = int(self.headers.get('Content-Length') or 0)
        while n > 0:
            k = len(self.rfile.read(min(n, 1 << 20))); n -= k
            if k == 0: break
        b = b'{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}'
        self.send_response(401); self.send_header('Content-Type','application/json'); self.send_header('Content-Length', str(len(b))); self.end_headers(); self.wfile.write(b)
    def log_message(self, *a): pass

up = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Up)
threading.Thread(target=up.serve_forever, daemon=True).start()

def start():
    d = tempfile.mkdtemp(prefix='rss')
    os.chmod(d, 0o700)
    cfg = os.path.join(d, 'ctxd.toml')
    open(cfg, 'w').write('[proxy]\nlisten = "127.0.0.1:0"\n[proxy.upstreams.anthropic]\nbase_url = "http://127.0.0.1:%d"\n' % up.server_address[1])
    sock = os.path.join(d, 'run', 'ctxd.sock')
    p = subprocess.Popen([os.environ.get('CTXD_BIN', 'ctxd'), '--socket', sock, '--data-dir', os.path.join(d, 'data'), '--config', cfg], stderr=subprocess.PIPE, env={'PATH': os.environ['PATH'], 'HOME': d, 'XDG_CONFIG_HOME': d})
    addr = None
    buf = b''
    while addr is None:
        line = p.stderr.readline()
        if not line: raise SystemExit('daemon exited')
        m = re.search(rb'provider proxy listening.*?listen"?[=:]"?([0-9.]+:[0-9]+)', line)
        if m: addr = m.group(1).decode()
    threading.Thread(target=lambda: p.stderr.read(), daemon=True).start()
    time.sleep(0.5)
    p.dir = d
    return p, addr

def hwm(p):
    for l in open('/proc/%d/status' % p.pid):
        if l.startswith('VmHWM') or l.startswith('VmRSS'):
            yield l.split()[0], int(l.split()[1]) // 1024

def cpu(p):
    # user + system CPU seconds of the daemon so far
    f = open('/proc/%d/stat' % p.pid).read().rsplit(')', 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf('SC_CLK_TCK')

def post(addr, body, slow=None):
    h, port = addr.split(':')
    s = socket.create_connection((h, int(port)))
    head = ('POST /v1/messages HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAnthropic-Version: 2023-06-01\r\nContent-Length: %d\r\n\r\n' % (addr, len(body))).encode()
    s.sendall(head)
    try:
        for i in range(0, len(body), 1 << 20):
            s.sendall(body[i:i + (1 << 20)])
    except Exception as e:
        pass
    s.settimeout(600)
    r = b''
    try:
        while True:
            c = s.recv(65536)
            if not c: break
            r += c
            if b'\r\n\r\n' in r:
                hd, _, bd = r.partition(b'\r\n\r\n')
                m = re.search(rb'Content-Length: (\d+)', hd)
                if m and len(bd) >= int(m.group(1)): break
    except Exception: pass
    s.close()
    return r.split(b'\r\n')[0].decode(), r[-200:]

scen = sys.argv[1]
p, addr = start()
base = dict(hwm(p))
cpu0 = cpu(p)
t0 = time.time()
if scen == 'blocks':
    blocks = b','.join([b'{"type":"text","text":"x"}'] * 1000000)
    body = b'{"model":"claude-opus-4-8","max_tokens":10,"messages":[{"role":"user","content":[' + blocks + b']}]}'
    print(len(body) >> 20, 'MiB body', post(addr, body))
elif scen == 'text30':
    body = b'{"model":"claude-opus-4-8","max_tokens":10,"messages":[{"role":"user","content":"' + b'x' * (30 << 20) + b'"}]}'
    print(len(body) >> 20, 'MiB body', post(addr, body))
elif scen == 'words30':
    # 30 MiB of random short words: text no cache has seen, the tokenizer's
    # worst case per byte.
    import random
    r = random.Random(1)
    words = [''.join(r.choice('abcdefghijklmnopqrstuvwxyz') for _ in range(r.randint(3, 10))) for _ in range(200000)]
    text = ' '.join(r.choice(words) + r.choice(words) for _ in range(30 << 17)).encode()[:30 << 20]
    body = b'{"model":"claude-opus-4-8","max_tokens":10,"messages":[{"role":"user","content":"' + text + b'"}]}'
    print(len(body) >> 20, 'MiB body', post(addr, body))
elif scen == 'text':
    body = b'{"model":"claude-opus-4-8","max_tokens":10,"messages":[{"role":"user","content":"' + b'x' * (50 << 20) + b'"}]}'
    print(len(body) >> 20, 'MiB body', post(addr, body))
elif scen == 'slow':
    h, port = addr.split(':')
    socks = []
    for i in range(12):
        s = socket.create_connection((h, int(port)))
        s.sendall(('POST /v1/messages HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n' % (addr, 64 << 20)).encode())
        s.sendall(b'{"model":"claude-opus-4-8","messages":[{"role":"user","content":"' + b'x' * (1 << 20))
        socks.append(s)
    if os.environ.get('PEEK'):
        time.sleep(20)
        print('after 20 s', dict(hwm(p)))
        for s in socks: s.close()
        socks = []
    answers = []
    for s in socks:
        s.settimeout(120)
        try: answers.append(s.recv(200).split(b'\r\n')[0].decode())
        except Exception as e: answers.append(str(e))
    print('12 slow bodies:', set(answers))
print('%s: %.1fs (daemon CPU %.1fs) baseline %s peak %s' % (scen, time.time() - t0, cpu(p) - cpu0, base, dict(hwm(p))))
p.terminate(); p.wait()
shutil.rmtree(p.dir, ignore_errors=True)
