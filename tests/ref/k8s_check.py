"""k8s_check.py MANIFEST_DIR BATON CONFIG ROOT PORT — checks that examples/k8s/ hangs together, then
runs what its pods run, on this machine (test_launch.c).

Checks: the Service selects the controller Deployment's pods and forwards to the port the
controller binds; each worker StatefulSet connects to the Service with its role's key; every
/keys/... file a container names is an item of its Secret volume, and every public key the
controller allows sits in its role's folder; secret files are readable by their owner alone; the
controller's workers.ROLE settings equal the StatefulSets' replicas.

Run: keys made with `baton keygen` as make-secret.sh makes them; each pod gets ROOT/pods/NAME/
holding its volumes at their mount paths (secret items copied with their modes, the ConfigMap
holding CONFIG, the volume claim shared at ROOT/pvc); its command is the manifest's, with
$(VAR) expanded as Kubernetes does, mount paths moved under the pod's folder, `baton` the
executable under test and the Service's host and port 127.0.0.1:PORT.  The controller and every
replica of every StatefulSet start; the script waits for the controller, stops the workers and
exits with the controller's status, having printed the run directory."""
import os
import re
import shutil
import signal
import subprocess
import sys

import yaml

mdir, baton, config, root, port = sys.argv[1:6]
docs = [d for f in sorted(os.listdir(mdir)) if f.endswith('.yaml')
        for d in yaml.safe_load_all(open(os.path.join(mdir, f))) if d]
by_kind = {}
for d in docs:
    by_kind.setdefault(d['kind'], []).append(d)


def fail(msg):
    print('k8s_check: ' + msg)
    sys.exit(1)


def need(cond, msg):
    if not cond:
        fail(msg)


(svc,) = by_kind['Service']
(dep,) = by_kind['Deployment']
sets = by_kind['StatefulSet']
pod = dep['spec']['template']
need(all(pod['metadata']['labels'].get(k) == v for k, v in svc['spec']['selector'].items()),
     'the Service does not select the controller pods')
(sport,) = svc['spec']['ports']
ctl = pod['spec']['containers'][0]
need(any(p['containerPort'] == sport['targetPort'] for p in ctl['ports']),
     'the Service forwards to a port the controller pod does not expose')
ctl_script = ' '.join(ctl['command'] + ctl.get('args', []))
need('--bind tcp://0.0.0.0:%d' % sport['targetPort'] in ctl_script,
     'the controller does not bind the port the Service forwards to')
service_endpoint = 'tcp://%s:%d' % (svc['metadata']['name'], sport['port'])


def env_of(container, pod_name):
    env = {}
    for e in container.get('env', []):
        if 'value' in e:
            env[e['name']] = str(e['value'])
        elif e.get('valueFrom', {}).get('fieldRef', {}).get('fieldPath') == 'metadata.name':
            env[e['name']] = pod_name
        else:
            fail('env %s: only values and metadata.name are understood' % e['name'])
    return env


def secret_paths(spec, mount):
    """The files a secret volume mounted at mount holds, with their keys and mode."""
    out = {}
    for v in spec['volumes']:
        s = v.get('secret')
        if s and mount.get(v['name']) is not None:
            need(s.get('defaultMode', 0o644) & 0o077 == 0,
                 'secret %s: defaultMode lets others read the keys' % v['name'])
            for it in s['items']:
                out[os.path.join(mount[v['name']], it['path'])] = it['key']
    return out


def mounts_of(spec, container):
    return {m['name']: m['mountPath'] for m in container.get('volumeMounts', [])}


ctl_keys = secret_paths(pod['spec'], mounts_of(pod['spec'], ctl))
for f in re.findall(r'/keys/[\w./-]+', ctl_script):
    need(any(p == f or p.startswith(f.rstrip('/') + '/') for p in ctl_keys),
         'the controller names %s, which its Secret volume lacks' % f)
replicas = {}
for ss in sets:
    spec = ss['spec']['template']['spec']
    (c,) = spec['containers']
    env = env_of(c, 'x')
    role = env['BATON_ROLE']
    replicas[role] = ss['spec']['replicas']
    need(env['BATON_CONNECT'] == service_endpoint,
         '%s connects to %s, not the Service %s' % (ss['metadata']['name'],
                                                     env['BATON_CONNECT'], service_endpoint))
    keys = secret_paths(spec, mounts_of(spec, c))
    need(env['BATON_KEY'] in keys and keys[env['BATON_KEY']] == role + '.key',
         '%s: BATON_KEY is not the %s key of the Secret' % (ss['metadata']['name'], role))
    need(env['BATON_SERVER_KEY'] in keys and keys[env['BATON_SERVER_KEY']] == 'controller.pub',
         '%s: BATON_SERVER_KEY is not the controller\'s public key' % ss['metadata']['name'])
    need(('/keys/workers/%s/%s.pub' % (role, role)) in ctl_keys and
         ctl_keys['/keys/workers/%s/%s.pub' % (role, role)] == role + '.pub',
         'the controller does not allow the %s key as %s only' % (role, role))
for role in ('trainer', 'rollout', 'eval'):
    m = re.search(r'workers\.%s=(\d+)' % role, ctl_script)
    need(m and int(m.group(1)) == replicas.get(role, 0),
         'workers.%s in the controller differs from the %s StatefulSet\'s replicas' % (role, role))

# ---- the run ----------------------------------------------------------------------------------
shutil.rmtree(root, ignore_errors=True)
secret = os.path.join(root, 'secret')
os.makedirs(secret)
for name in ('controller', 'trainer', 'rollout', 'eval'):
    subprocess.run([baton, 'keygen', secret, '--name', name], check=True, stdout=subprocess.DEVNULL)
pvc = os.path.join(root, 'pvc')
os.makedirs(pvc)


def materialize(spec, container, home):
    """Builds the pod's volumes under home; returns [(mountPath, local path)]."""
    moved = []
    for m in container.get('volumeMounts', []):
        (v,) = [v for v in spec['volumes'] if v['name'] == m['name']]
        local = home + m['mountPath']
        if 'persistentVolumeClaim' in v:
            os.makedirs(os.path.dirname(local), exist_ok=True)
            os.symlink(pvc, local)
        elif 'secret' in v:
            for it in v['secret']['items']:
                dst = os.path.join(local, it['path'])
                os.makedirs(os.path.dirname(dst), mode=0o700, exist_ok=True)
                shutil.copyfile(os.path.join(secret, it['key']), dst)
                os.chmod(dst, v['secret']['defaultMode'])
        elif 'configMap' in v:
            for it in v['configMap']['items']:
                os.makedirs(local, exist_ok=True)
                shutil.copyfile(config, os.path.join(local, it['path']))
        moved.append((m['mountPath'], local))
    return moved


def launch(spec, container, pod_name, log):
    home = os.path.join(root, 'pods', pod_name)
    os.makedirs(home)
    moved = materialize(spec, container, home)
    env = env_of(container, pod_name)

    def local(text):
        text = re.sub(r'\$\((\w+)\)', lambda m: env.get(m.group(1), m.group(0)), text)
        text = text.replace(service_endpoint, 'tcp://127.0.0.1:%s' % port)
        text = text.replace('tcp://0.0.0.0:%d' % sport['targetPort'], 'tcp://127.0.0.1:%s' % port)
        for mount, path in moved:
            text = re.sub(r'(?<![\w/])' + re.escape(mount) + r'(?=/|\b)', path, text)
        return text

    argv = [local(a) for a in container['command'] + container.get('args', [])]
    if argv[0] == 'baton':
        argv[0] = baton
    else:  # a shell script: its `baton` is the one under test
        argv = [re.sub(r'\bexec baton\b', 'exec ' + baton, a) for a in argv]
    penv = dict(os.environ, **{k: local(v) for k, v in env.items()})
    return subprocess.Popen(argv, env=penv, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)


logs = open(os.path.join(root, 'pods.log'), 'w')
controller = launch(pod['spec'], ctl, dep['metadata']['name'] + '-0', logs)
workers = []
for ss in sets:
    spec = ss['spec']['template']['spec']
    for i in range(ss['spec']['replicas']):
        workers.append(launch(spec, spec['containers'][0], '%s-%d' % (ss['metadata']['name'], i),
                              logs))
try:
    rc = controller.wait(timeout=240)
finally:
    for w in workers + [controller]:
        if w.poll() is None:
            os.killpg(w.pid, signal.SIGKILL)
            w.wait()
logs.close()
run_dir = env_of(ctl, 'x')['RUN_DIR'].replace('/runs', pvc, 1)
print('run_dir=' + run_dir)
if rc != 0:
    print(open(os.path.join(root, 'pods.log')).read())
sys.exit(rc)
