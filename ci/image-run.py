"""The container run of ci/image.sh: the Deployment's settings as podman
options (prepare), then the checks on the running container (check).

  image-run.py prepare DEPLOY_YAML CERTS_DIR RUN_DIR
      writes the mounted volumes under RUN_DIR/volumes and the ports chosen
      to RUN_DIR/ports.json; prints podman run options, "--", and the
      container args, one a line.
  image-run.py check DEPLOY_YAML CERTS_DIR RUN_DIR REVIEW_JSON PODMAN CONTAINER
      probes, reviews over TLS, PID 1, and the SIGTERM drain.
"""
import base64, copy, http.client, json, os, shlex, socket, ssl, subprocess, sys, threading, time, urllib.error, urllib.request

import yaml

SERVICE_DNS = "gpu-admission.gpu-admission.svc"


def fail(msg):
    sys.exit(f"image: {msg}")


def deployment(path):
    objs = [d for d in yaml.safe_load_all(open(path)) if d]
    deps = [o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"] == "gpu-admission"]
    if len(deps) != 1:
        fail(f"{path}: expected one Deployment gpu-admission, found {len(deps)}")
    return objs, deps[0]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def prepare(deploy_yaml, certs, run_dir):
    objs, dep = deployment(deploy_yaml)
    ns = dep["metadata"]["namespace"]
    spec = dep["spec"]["template"]["spec"]
    container = spec["containers"][0]
    psec, csec = spec.get("securityContext", {}), container.get("securityContext", {})
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    local = {name: free_port() for name in ports}
    os.makedirs(run_dir, exist_ok=True)
    with open(os.path.join(run_dir, "ports.json"), "w") as f:
        json.dump({"ports": ports, "local": local}, f)

    opts = []
    if psec.get("runAsNonRoot") is not True or "runAsUser" not in psec:
        fail("the Deployment does not run as a non-root user")
    opts += ["--user", f'{psec["runAsUser"]}:{psec.get("runAsGroup", psec["runAsUser"])}']
    if "fsGroup" in psec:
        opts += ["--group-add", str(psec["fsGroup"])]
    if csec.get("readOnlyRootFilesystem"):
        opts.append("--read-only")
    for cap in csec.get("capabilities", {}).get("drop", []):
        opts += ["--cap-drop", cap]
    if csec.get("allowPrivilegeEscalation") is False:
        opts += ["--security-opt", "no-new-privileges"]

    volumes = {}
    for v in spec["volumes"]:
        path = os.path.join(run_dir, "volumes", v["name"])
        os.makedirs(path)
        if "configMap" in v:
            cms = [o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == v["configMap"]["name"]]
            if len(cms) != 1:
                fail(f"volume {v['name']}: ConfigMap {v['configMap']['name']} is not rendered")
            files = {k: d.encode() for k, d in cms[0].get("data", {}).items()}
            mode = v["configMap"].get("defaultMode", 0o644)
        elif "secret" in v:
            files = {k: open(os.path.join(certs, k), "rb").read() for k in ("tls.crt", "tls.key", "ca.crt")}
            mode = v["secret"].get("defaultMode", 0o644)
        else:
            fail(f"volume {v['name']}: neither a ConfigMap nor a Secret")
        for name, data in files.items():
            with open(os.path.join(path, name), "wb") as f:
                f.write(data)
            os.chmod(os.path.join(path, name), mode)
        volumes[v["name"]] = path
    for m in container["volumeMounts"]:
        opts += ["-v", f'{volumes[m["name"]]}:{m["mountPath"]}:{"ro" if m.get("readOnly") else "rw"}']

    env = {}
    for e in container.get("env", []):
        if "value" in e:
            env[e["name"]] = e["value"]
        elif e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.namespace":
            env[e["name"]] = ns
        elif e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.name":
            env[e["name"]] = "gpu-admission-ci"
        else:
            fail(f"env {e['name']}: no value this run can give")
    for k, v in env.items():
        opts += ["-e", f"{k}={v}"]

    args = []
    for a in container["args"]:
        for k, v in env.items():  # the kubelet expands $(VAR) from the container's env
            a = a.replace(f"$({k})", v)
        flag, _, value = a.partition("=")
        if flag in ("--listen", "--metrics-listen", "--health-listen"):
            port = int(value.rsplit(":", 1)[1])
            name = next(n for n, p in ports.items() if p == port)
            a = f"{flag}=127.0.0.1:{local[name]}"
        args.append(a)
    print("\n".join(opts + ["--"] + args))


def connect(port, ctx):
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=30)
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    conn.sock = ctx.wrap_socket(sock, server_hostname=SERVICE_DNS)
    return conn


def post(conn, path, review):
    body = json.dumps(review).encode()
    conn.request("POST", f"{path}?timeout=5s", body=body, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    data = resp.read()
    return resp, json.loads(data or b"{}")


def check(deploy_yaml, certs, run_dir, review_file, podman, name):
    _, dep = deployment(deploy_yaml)
    spec = dep["spec"]["template"]["spec"]
    container = spec["containers"][0]
    local = json.load(open(os.path.join(run_dir, "ports.json")))["local"]
    podman = shlex.split(podman)

    def running():
        out = subprocess.run(podman + ["inspect", "--format", "{{.State.Running}}", name],
                             capture_output=True, text=True)
        return out.stdout.strip() == "true"

    def logs():
        return subprocess.run(podman + ["logs", name], capture_output=True, text=True).stdout[-3000:]

    def probe(kind):
        get = container[kind]["httpGet"]
        try:
            with urllib.request.urlopen(f'http://127.0.0.1:{local[get["port"]]}{get["path"]}', timeout=5) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code
        except OSError:
            return None

    # Readiness: polled until it answers or the container ends; the bound
    # only keeps a hung start from hanging CI.
    deadline = time.monotonic() + 60
    while probe("readinessProbe") != 200:
        if not running() or time.monotonic() > deadline:
            fail(f"the readiness probe never answered 200\n{logs()}")
        time.sleep(0.2)
    for kind in ("readinessProbe", "livenessProbe"):
        status = probe(kind)
        if status != 200:
            fail(f"{kind} {container[kind]['httpGet']['path']} answered {status}")
        print(f"{kind}: GET {container[kind]['httpGet']['path']} -> 200")

    # The server is PID 1 of the container.
    pid = subprocess.run(podman + ["inspect", "--format", "{{.State.Pid}}", name],
                         capture_output=True, text=True, check=True).stdout.strip()
    status = open(f"/proc/{pid}/status").read()
    nspid = next(line.split()[1:] for line in status.splitlines() if line.startswith("NSpid:"))
    exe = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")[0].decode()
    uid = next(line.split()[1:] for line in status.splitlines() if line.startswith("Uid:"))
    if nspid[-1] != "1" or exe != "/usr/local/bin/gpu-admission":
        fail(f"PID 1 of the container is {exe} (pid {nspid[-1]} in its namespace)")
    if set(uid) != {"65532"}:
        fail(f"the server runs as uid {uid}, not 65532")
    print(f"PID 1: {exe}, uid 65532 (host pid {pid})")

    ctx = ssl.create_default_context(cafile=os.path.join(certs, "ca.crt"))
    review = json.load(open(review_file))
    https = local["https"]
    conn = connect(https, ctx)
    resp, body = post(conn, "/mutate", review)
    answer = body.get("response", {})
    if resp.status != 200 or answer.get("uid") != review["request"]["uid"] or answer.get("allowed") is not True:
        fail(f"/mutate answered HTTP {resp.status}: {str(body)[:300]}")
    if answer.get("patchType") != "JSONPatch" or not answer.get("patch"):
        fail(f"/mutate gave the GPU pod no JSON patch: {str(answer)[:300]}")
    patch = json.loads(base64.b64decode(answer["patch"]))
    paths = sorted({op["path"].split("/")[2] if op["path"].count("/") > 1 else op["path"] for op in patch})
    if not any(p in ("tolerations", "affinity") for p in paths):
        fail(f"/mutate's patch does not place the GPU pod: {patch}")
    print(f"/mutate over TLS ({SERVICE_DNS}): allowed, JSONPatch of {len(patch)} operations ({', '.join(paths)})")
    resp, body = post(conn, "/validate", review)
    answer = body.get("response", {})
    if resp.status != 200 or answer.get("allowed") is not True or "patch" in answer:
        fail(f"/validate answered HTTP {resp.status}: {str(body)[:300]}")
    print("/validate over TLS: allowed")
    conn.close()

    drain(podman, name, https, ctx, review, spec.get("terminationGracePeriodSeconds", 30), logs)


def drain(podman, name, port, ctx, review, grace, logs):
    """SIGTERM to PID 1 while clients send reviews: every review sent is
    answered, and the container exits 0 within the grace period."""
    stop = threading.Event()
    lock = threading.Lock()
    counts = {"sent": 0, "answered": 0, "connections": 0, "closed_by_drain": 0}
    lost, started = [], threading.Semaphore(0)

    def client(n):
        """Reviews on a keep-alive connection, a new one whenever the server
        closes it, until SIGTERM; then on until the server says
        Connection: close (the drain has begun)."""
        seq, conn, warmed, told_close = 0, None, 0, False
        while True:
            if conn is None:
                try:
                    conn = connect(port, ctx)
                except ConnectionRefusedError:
                    # The listener is closed: the drain has begun (the last
                    # answer said Connection: close), or the server is gone.
                    with lock:
                        if told_close:
                            counts["closed_by_drain"] += 1
                        else:
                            lost.append(f"client {n}: connection refused with no Connection: close before it")
                    return
                with lock:
                    counts["connections"] += 1
            seq += 1
            r = copy.deepcopy(review)
            r["request"]["uid"] = f"drain-{n}-{seq}"
            body = json.dumps(r).encode()
            try:
                conn.putrequest("POST", "/validate?timeout=5s")
                conn.putheader("Content-Type", "application/json")
                conn.putheader("Content-Length", str(len(body)))
                conn.endheaders(body)
            except OSError as e:
                with lock:
                    lost.append(f"{r['request']['uid']}: could not be sent on an open connection: {e}")
                return
            with lock:
                counts["sent"] += 1
            try:
                resp = conn.getresponse()
                answer = json.loads(resp.read()).get("response", {})
                close = (resp.getheader("Connection") or "").lower() == "close"
            except (OSError, http.client.HTTPException, ValueError) as e:
                with lock:
                    lost.append(f"{r['request']['uid']}: {type(e).__name__}: {e}")
                return
            if resp.status == 200 and answer.get("uid") == r["request"]["uid"] and answer.get("allowed") is True:
                with lock:
                    counts["answered"] += 1
            else:
                with lock:
                    lost.append(f"{r['request']['uid']}: HTTP {resp.status}, {str(answer)[:200]}")
            warmed += 1
            if warmed == 20:
                started.release()
            if close:
                conn.close()
                conn = None
                told_close = True
                if stop.is_set():
                    with lock:
                        counts["closed_by_drain"] += 1
                    return

    threads = [threading.Thread(target=client, args=(n,), daemon=True) for n in range(4)]
    for t in threads:
        t.start()
    for _ in threads:
        if not started.acquire(timeout=60):
            fail(f"the drain clients did not get going: {lost[:3]}\n{logs()}")

    # A review half sent before SIGTERM, finished after it.
    r = copy.deepcopy(review)
    r["request"]["uid"] = "drain-half-sent"
    body = json.dumps(r).encode()
    half = connect(port, ctx)
    half.putrequest("POST", "/validate?timeout=5s")
    half.putheader("Content-Type", "application/json")
    half.putheader("Content-Length", str(len(body)))
    half.endheaders(body[: len(body) // 2])

    subprocess.run(podman + ["kill", "--signal", "TERM", name], check=True, capture_output=True)
    stop.set()
    # The clients end when the server, draining, tells them
    # Connection: close; the half-sent review is finished after that.
    for t in threads:
        t.join(timeout=grace)
        if t.is_alive():
            fail("a drain client is still running after the grace period")
    if counts["closed_by_drain"] == 0:
        fail(f"no client was told Connection: close after SIGTERM: {lost[:3]}\n{logs()}")
    half.send(body[len(body) // 2:])
    try:
        resp = half.getresponse()
        answer = json.loads(resp.read()).get("response", {})
    except (OSError, http.client.HTTPException, ValueError) as e:
        fail(f"the review half sent before SIGTERM got no answer: {type(e).__name__}: {e}\n{logs()}")
    if resp.status != 200 or answer.get("uid") != "drain-half-sent" or answer.get("allowed") is not True:
        fail(f"the review half sent before SIGTERM: HTTP {resp.status}, {str(answer)[:200]}")
    half.close()

    try:
        code = subprocess.run(podman + ["wait", name], capture_output=True, text=True, timeout=grace).stdout.strip()
    except subprocess.TimeoutExpired:
        fail(f"the container still runs {grace} s (terminationGracePeriodSeconds) after SIGTERM\n{logs()}")
    log = logs()
    if "panicked" in log:
        fail(f"the server panicked:\n{log}")
    print(f"SIGTERM drain: {counts['sent']} reviews sent on {counts['connections']} connections by 4 clients, "
          f"{counts['answered']} answered, {len(lost)} lost; {counts['closed_by_drain']} clients told "
          f"Connection: close after SIGTERM; the review half sent before SIGTERM answered; exit status {code}")
    for item in lost[:10]:
        print(f"  lost {item}")
    if lost or counts["answered"] != counts["sent"]:
        fail(f"{len(lost)} reviews lost in the drain\n{log}")
    if code != "0":
        fail(f"exit status {code} after SIGTERM (expected 0)\n{log}")


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "prepare":
        prepare(*sys.argv[2:])
    elif len(sys.argv) == 8 and sys.argv[1] == "check":
        check(*sys.argv[2:])
    else:
        sys.exit(__doc__)
