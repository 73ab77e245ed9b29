//! The GPU boundary through the shipped webhook configurations: each way a
//! pod could see GPUs it was not given, or reach a GPU node without asking
//! for a GPU, next to the legitimate work that must still get through (MPI
//! launchers, Volcano vGPU pods, the GPU Operator's validator). The server
//! watches a cluster of three pools: system (CPU), gpupool (T4, tainted)
//! and a100 (A100, tainted), with the GPU Operator's labels on GPU nodes.
use crate::common;

use common::webhooks::{Cluster, Outcome, Review};
use gpu_admission::gpu::StaticNodes;
use gpu_admission::k8s::{NodeInfo, Taint};
use serde_json::{json, Value};

fn node(name: &str, pool: &str, size: &str, gpus: u32) -> NodeInfo {
    let mut labels: Vec<(&str, &str)> = vec![
        ("kubernetes.azure.com/agentpool", pool),
        ("node.kubernetes.io/instance-type", size),
        ("kubernetes.io/os", "linux"),
        ("kubernetes.io/hostname", name),
    ];
    if gpus > 0 {
        labels.push(("kubernetes.azure.com/accelerator", "nvidia"));
        labels.push(("nvidia.com/gpu.present", "true"));
        labels.push(("nvidia.com/gpu.deploy.dcgm-exporter", "true"));
    }
    NodeInfo {
        name: name.to_string(),
        labels: labels
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        taints: if gpus > 0 {
            vec![Taint::parse("sku=gpu:NoSchedule").unwrap()]
        } else {
            Vec::new()
        },
        allocatable: [
            ("cpu", "3860m".to_string()),
            ("nvidia.com/gpu", gpus.to_string()),
        ]
        .into_iter()
        .filter(|(k, v)| *k == "cpu" || v != "0")
        .map(|(k, v)| (k.to_string(), v))
        .collect(),
        conditions: Vec::new(),
    }
}

const SYSTEM_NODE: &str = "aks-system-31415926-vmss000000";
const T4_NODE: &str = "aks-gpupool-27182818-vmss000000";
const A100_NODE: &str = "aks-a100-16180339-vmss000000";

async fn cluster() -> Cluster {
    Cluster::start_with_nodes(StaticNodes::new(vec![
        node(SYSTEM_NODE, "system", "Standard_D4s_v5", 0),
        node(T4_NODE, "gpupool", "Standard_NC4as_T4_v3", 1),
        node(A100_NODE, "a100", "Standard_NC24ads_A100_v4", 1),
    ]))
    .await
}

fn pod(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml"}, "spec": spec})
}

/// A container asking for `gpus` NVIDIA GPUs, as a training job writes it.
fn trainer(gpus: &str) -> Value {
    json!({"name": "train", "image": "nvcr.io/nvidia/pytorch:24.05-py3",
        "command": ["python", "train.py"],
        "resources": {"requests": {"cpu": "3", "memory": "16Gi", "nvidia.com/gpu": gpus},
                      "limits": {"memory": "16Gi", "nvidia.com/gpu": gpus}}})
}

fn denied_by(outcome: &Outcome, text: &str) {
    assert!(!outcome.allowed, "allowed: {outcome:?}");
    assert!(
        outcome.message().contains(text),
        "{text:?} not in: {}",
        outcome.message()
    );
}

fn env_of(outcome: &Outcome, path: &str) -> Value {
    outcome
        .object
        .as_ref()
        .and_then(|o| o.pointer(path))
        .cloned()
        .unwrap_or(Value::Null)
}

// ---------------------------------------------------------------------------
// A pod that reserves one GPU uses all of them: every path is closed.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn visible_devices_all_in_the_gpu_container_itself_is_denied() {
    let c = cluster().await;
    let mut train = trainer("1");
    train["env"] = json!([{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]);
    let outcome = c
        .admit(&Review::create(pod(
            "greedy",
            json!({"containers": [train]}),
        )))
        .await;
    denied_by(
        &outcome,
        "gpu-visible-devices-leak: container train sets NVIDIA_VISIBLE_DEVICES itself",
    );
    // The twin without the variable is placed and allowed.
    let outcome = c
        .admit(&Review::create(pod(
            "fair",
            json!({"containers": [trainer("1")]}),
        )))
        .await;
    assert!(outcome.allowed, "{}", outcome.message());
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn env_from_and_cuda_image_sidecars_get_the_gpus_hidden() {
    let c = cluster().await;
    let spec = json!({"containers": [
        trainer("1"),
        {"name": "config-agent", "image": "busybox:1.36", "envFrom": [{"configMapRef": {"name": "gpu-settings"}}]},
        {"name": "metrics", "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04", "command": ["sleep", "60"]},
        {"name": "launcher", "image": "mpioperator/openmpi:v0.6.0", "env": [{"name": "NVIDIA_VISIBLE_DEVICES"}]}
    ]});
    let outcome = c.admit(&Review::create(pod("sidecars", spec))).await;
    assert!(outcome.allowed, "{}", outcome.message());
    let void = json!([{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]);
    assert_eq!(env_of(&outcome, "/spec/containers/1/env"), void);
    assert_eq!(env_of(&outcome, "/spec/containers/2/env"), void);
    assert_eq!(
        env_of(&outcome, "/spec/containers/0/env"),
        Value::Null,
        "the GPU container"
    );
    assert_eq!(
        env_of(&outcome, "/spec/containers/3/env"),
        json!([{"name": "NVIDIA_VISIBLE_DEVICES"}]),
        "an explicit empty value is kept"
    );
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cdi_annotation_and_a_device_list_mount_are_denied() {
    let c = cluster().await;
    let mut cdi = pod("cdi", json!({"containers": [trainer("1")]}));
    cdi["metadata"]["annotations"] = json!({"cdi.k8s.io/gpus": "nvidia.com/gpu=all"});
    let outcome = c.admit(&Review::create(cdi)).await;
    denied_by(
        &outcome,
        "container train gets nvidia.com/gpu=all (every GPU of the node) from pod annotation cdi.k8s.io/gpus, \
         which the container runtime injects behind the scheduler's back, beyond the GPUs the device plugin gives it",
    );

    // Without a GPU request at all, the CPU pod is still sent and denied.
    let mut cpu = pod(
        "cdi-cpu",
        json!({"containers": [{"name": "app", "image": "python:3.12"}]}),
    );
    cpu["metadata"]["annotations"] = json!({"cdi.k8s.io/x": "nvidia.com/gpu=0"});
    let outcome = c.admit(&Review::create(cpu)).await;
    assert_eq!(outcome.validated_by, ["pods.validate.gpu-admission.io"]);
    denied_by(
        &outcome,
        "container app gets nvidia.com/gpu=0 (GPU 0) from pod annotation cdi.k8s.io/x",
    );

    let mut train = trainer("1");
    train["volumeMounts"] =
        json!([{"name": "list", "mountPath": "/var/run/nvidia-container-devices/all"}]);
    let spec = json!({"containers": [train], "volumes": [{"name": "list", "emptyDir": {}}]});
    let outcome = c.admit(&Review::create(pod("mounts", spec))).await;
    denied_by(
        &outcome,
        "container train mounts a volume at /var/run/nvidia-container-devices",
    );
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_running_privileged_init_container_is_denied() {
    let c = cluster().await;
    let spec = json!({
        "initContainers": [{"name": "prepare", "image": "busybox:1.36",
            "command": ["sh", "-c", "sleep infinity"], "securityContext": {"privileged": true}}],
        "containers": [trainer("1")]
    });
    let outcome = c.admit(&Review::create(pod("init", spec))).await;
    denied_by(
        &outcome,
        "gpu-privileged: init container prepare is privileged in a GPU pod and would see every GPU of the node",
    );
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allow_listed_image_in_a_user_namespace_exempts_nothing() {
    let c = cluster().await;
    let ds = json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "metrics", "namespace": "ml"},
        "spec": {"selector": {"matchLabels": {"app": "metrics"}},
            "template": {"metadata": {"labels": {"app": "metrics"}}, "spec": {
                "tolerations": [{"operator": "Exists"}],
                "containers": [{"name": "exporter",
                    "image": "nvcr.io/nvidia/k8s/dcgm-exporter:3.3.9-3.6.1-ubuntu22.04",
                    "command": ["sh", "-c", "python3 /work/train.py"],
                    "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}]}}}});
    let outcome = c.admit(&Review::create(ds.clone())).await;
    assert_eq!(
        outcome.validated_by,
        ["workloads.validate.gpu-admission.io"]
    );
    denied_by(
        &outcome,
        "DaemonSet metrics: container exporter runs nvcr.io/nvidia/k8s/dcgm-exporter, GPU infrastructure that must see every GPU",
    );
    // The same DaemonSet in a namespace an admin marked as infrastructure.
    let mut infra = ds;
    infra["metadata"]["namespace"] = json!("monitoring");
    let outcome = c
        .admit(
            &Review::create(infra)
                .namespace_labels(&[("gpu-admission.io/gpu-infrastructure", "true")]),
        )
        .await;
    assert!(outcome.allowed, "{}", outcome.message());
    c.stop().await;
}

// ---------------------------------------------------------------------------
// CPU work stays off GPU nodes by every path.

fn cpu_container() -> Value {
    json!({"name": "app", "image": "python:3.12", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduler_that_is_not_a_sharing_one_switches_nothing_off() {
    let c = cluster().await;
    let mut p = pod(
        "fraction",
        json!({
        "schedulerName": "my-scheduler",
        "tolerations": [{"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}],
        "containers": [cpu_container()]}),
    );
    p["metadata"]["annotations"] = json!({"gpu-fraction": "0.5"});
    let outcome = c.admit(&Review::create(p.clone())).await;
    denied_by(
        &outcome,
        "gpu-node-isolation: pod asks for no GPU but tolerates the GPU node taint",
    );
    // KAI's own scheduler acts on the annotation: a GPU pod.
    p["spec"]["schedulerName"] = json!("kai-scheduler");
    let outcome = c.admit(&Review::create(p)).await;
    assert!(outcome.allowed, "{}", outcome.message());
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tolerate_all_pods_aiming_at_gpu_nodes_are_denied() {
    let c = cluster().await;
    let tolerate_all = json!([{"operator": "Exists"}]);
    // GPU Operator labels, the agent pool name, preferred affinity.
    let selections = [
        json!({"nodeSelector": {"nvidia.com/gpu.deploy.dcgm-exporter": "true"}}),
        json!({"nodeSelector": {"kubernetes.azure.com/agentpool": "gpupool"}}),
        json!({"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100,
            "preference": {"matchExpressions": [{"key": "kubernetes.azure.com/agentpool", "operator": "In", "values": ["a100"]}]}}]}}}),
    ];
    for selection in selections {
        let mut spec = selection.clone();
        spec["tolerations"] = tolerate_all.clone();
        spec["containers"] = json!([cpu_container()]);
        let outcome = c.admit(&Review::create(pod("agent", spec))).await;
        denied_by(&outcome, "gpu-node-isolation: pod asks for no GPU but");
        assert!(
            outcome.message().contains("it can land on aks-"),
            "{}",
            outcome.message()
        );
    }
    // Tolerating everything without aiming: a warning, as before.
    let spec = json!({"tolerations": tolerate_all, "containers": [cpu_container()]});
    let outcome = c.admit(&Review::create(pod("operator", spec))).await;
    assert!(outcome.allowed, "{}", outcome.message());
    assert!(
        outcome
            .warnings
            .iter()
            .any(|w| w.starts_with("gpu-tolerate-all:")),
        "{:?}",
        outcome.warnings
    );
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_name_is_routed_and_judged_like_scheduling() {
    let c = cluster().await;
    // A CPU pod bound to a GPU node skips the scheduler and the taint.
    let outcome = c
        .admit(&Review::create(pod(
            "bound",
            json!({"nodeName": T4_NODE, "containers": [cpu_container()]}),
        )))
        .await;
    assert_eq!(outcome.validated_by, ["pods.validate.gpu-admission.io"]);
    denied_by(
        &outcome,
        &format!("pod asks for no GPU but is bound by spec.nodeName to GPU node {T4_NODE}"),
    );
    // Bound to a CPU node: allowed.
    let outcome = c
        .admit(&Review::create(pod(
            "bound",
            json!({"nodeName": SYSTEM_NODE, "containers": [cpu_container()]}),
        )))
        .await;
    assert!(outcome.allowed, "{}", outcome.message());
    // A 1-GPU pod bound to an A100 node in a default-tier namespace: the
    // tier and premium checks see the node's size.
    let outcome = c
        .admit(&Review::create(pod(
            "a100",
            json!({"nodeName": A100_NODE, "containers": [trainer("1")]}),
        )))
        .await;
    denied_by(&outcome, "gpu-sku-allowlist");
    assert!(
        outcome.message().contains("Standard_NC24ads_A100_v4"),
        "{}",
        outcome.message()
    );
    let outcome = c
        .admit(&Review::create(pod(
            "t4",
            json!({"nodeName": T4_NODE, "containers": [trainer("1")]}),
        )))
        .await;
    assert!(outcome.allowed, "{}", outcome.message());
    c.stop().await;
}

/// The pod `kubectl debug node/<node> --profile=sysadmin -it --image=busybox`
/// creates: bound to the node by name, in the host's namespaces, tolerating
/// every taint, privileged, the host's root at /host.
fn node_debugger(node: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("node-debugger-{node}-x7k2p"), "namespace": "default",
            "labels": {"app.kubernetes.io/managed-by": "kubectl-debug"}},
        "spec": {
            "containers": [{"name": "debugger", "image": "busybox", "imagePullPolicy": "Always",
                "stdin": true, "tty": true, "terminationMessagePolicy": "FallbackToLogsOnError",
                "securityContext": {"privileged": true},
                "volumeMounts": [{"name": "host-root", "mountPath": "/host"}]}],
            "hostIPC": true, "hostNetwork": true, "hostPID": true,
            "nodeName": node, "restartPolicy": "Never",
            "tolerations": [{"operator": "Exists"}],
            "volumes": [{"name": "host-root", "hostPath": {"path": "/"}}]}})
}

const NODE_DEBUG_ANNOTATION: &str = "gpu-node-isolation.admin-node-debug";

/// `kubectl debug node/<GPU node>` by an SRE in an admin group passes,
/// recorded in the audit log; a tenant's is denied with whom to ask, however
/// much its pod looks like kubectl's: only request.userInfo decides.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_debugging_is_for_the_admin_groups_and_recorded() {
    let c = cluster().await;
    let debugger = node_debugger(T4_NODE);
    for group in ["gpu-admission:admins", "system:masters"] {
        let outcome = c
            .admit(&Review::create(debugger.clone()).by("sre@example.com", &[group]))
            .await;
        assert_eq!(outcome.validated_by, ["pods.validate.gpu-admission.io"]);
        assert!(outcome.allowed, "{group}: {}", outcome.message());
        assert_eq!(
            outcome.audit_annotations[NODE_DEBUG_ANNOTATION],
            format!(
                "sre@example.com ({group}) bound a pod that asks for no GPU to GPU node {T4_NODE} by spec.nodeName (node debugging, allowed for the admin groups)"
            ),
            "{:?}",
            outcome.audit_annotations
        );
    }
    // A tenant's, and one that claims admin-like things where the
    // requester writes them (name, labels, annotations, username).
    let mut dressed = debugger.clone();
    dressed["metadata"]["labels"]["gpu-admission.io/admin"] = json!("true");
    dressed["metadata"]["annotations"] = json!({"gpu-admission.io/groups": "gpu-admission:admins"});
    let reviews = [
        Review::create(debugger.clone()),
        Review::create(dressed).by("gpu-admission:admins", &["admins", "gpu-admission"]),
    ];
    for review in &reviews {
        let outcome = c.admit(review).await;
        denied_by(
            &outcome,
            &format!(
                "gpu-node-isolation: pod asks for no GPU but is bound by spec.nodeName to GPU node {T4_NODE}"
            ),
        );
        assert!(
            outcome.message().ends_with(&format!(
                "; remove spec.nodeName, or request a GPU in resources.limits; to debug GPU node {T4_NODE} (kubectl debug node/{T4_NODE}), ask a member of gpu-admission:admins, system:masters"
            )),
            "{}",
            outcome.message()
        );
        assert!(!outcome
            .audit_annotations
            .contains_key(NODE_DEBUG_ANNOTATION));
    }
    // Debugging a CPU node needs no exemption and records none.
    let outcome = c.admit(&Review::create(node_debugger(SYSTEM_NODE))).await;
    assert!(outcome.allowed, "{}", outcome.message());
    assert!(!outcome
        .audit_annotations
        .contains_key(NODE_DEBUG_ANNOTATION));
    // An admin's Deployment bound to a GPU node by name is not node
    // debugging: its pods are created by a controller, and judged.
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "pinned", "namespace": "default"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "pinned"}},
            "template": {"metadata": {"labels": {"app": "pinned"}},
                "spec": {"nodeName": T4_NODE, "containers": [cpu_container()]}}}});
    let outcome = c
        .admit(&Review::create(deployment).by("sre@example.com", &["gpu-admission:admins"]))
        .await;
    denied_by(&outcome, "bound by spec.nodeName to GPU node");
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_is_judged_as_its_pods_will_be() {
    let c = cluster().await;
    // 8 GPUs in a default-tier namespace: no size of the tier has 8 GPUs,
    // so each pod would be denied; the StatefulSet is, at apply.
    let mut big = trainer("8");
    big["resources"]["requests"]["cpu"] = json!("32");
    let sts = json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "llm", "namespace": "ml"},
        "spec": {"serviceName": "llm", "selector": {"matchLabels": {"app": "llm"}},
            "template": {"metadata": {"labels": {"app": "llm"}}, "spec": {"containers": [big.clone()]}}}});
    let outcome = c.admit(&Review::create(sts)).await;
    assert!(
        !outcome.allowed,
        "an 8-GPU StatefulSet in a default-tier namespace: {outcome:?}"
    );
    let as_pod = c
        .admit(&Review::create(pod("llm-0", json!({"containers": [big]}))))
        .await;
    assert!(!as_pod.allowed, "{as_pod:?}");
    c.stop().await;
}

// ---------------------------------------------------------------------------
// Legitimate work gets through.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mpi_launchers_that_hide_gpus_are_allowed() {
    let c = cluster().await;
    // mpi-operator v2beta1: the launcher's NVIDIA_VISIBLE_DEVICES and
    // NVIDIA_DRIVER_CAPABILITIES without a value.
    let v2 = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "tensorflow-benchmarks-launcher-x7k2p", "namespace": "ml",
            "labels": {"training.kubeflow.org/job-name": "tensorflow-benchmarks", "training.kubeflow.org/job-role": "launcher"},
            "ownerReferences": [{"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "name": "tensorflow-benchmarks",
                "uid": "0b6c2f1f-6e21-4c1e-9d55-5b0c0a578f1e", "controller": true, "blockOwnerDeletion": true}]},
        "spec": {"restartPolicy": "OnFailure", "containers": [{"name": "launcher",
            "image": "mpioperator/tensorflow-benchmarks:latest",
            "command": ["mpirun", "--allow-run-as-root", "-np", "2", "python", "scripts/tf_cnn_benchmarks/tf_cnn_benchmarks.py"],
            "env": [{"name": "OMPI_MCA_orte_keep_fqdn_hostnames", "value": "true"},
                    {"name": "NVIDIA_VISIBLE_DEVICES"}, {"name": "NVIDIA_DRIVER_CAPABILITIES"}]}]}});
    let outcome = c
        .admit(&Review::create(v2).by(
            "system:serviceaccount:mpi-operator:mpi-operator",
            &["system:serviceaccounts"],
        ))
        .await;
    assert_eq!(outcome.validated_by, ["pods.validate.gpu-admission.io"]);
    assert!(outcome.allowed, "{}", outcome.message());
    // The Training Operator's v1 MPIJob launcher sets the same to "".
    let v1 = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "mpi-job-launcher", "namespace": "ml",
            "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": "MPIJob", "name": "mpi-job",
                "uid": "6e214c1e-0b6c-2f1f-9d55-5b0c0a578f1e", "controller": true}]},
        "spec": {"containers": [{"name": "mpi-launcher", "image": "docker.io/kubeflow/mpi-horovod-mnist:latest",
            "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": ""}, {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": ""}]}]}});
    let outcome = c
        .admit(&Review::create(v1).by(
            "system:serviceaccount:kubeflow:training-operator",
            &["system:serviceaccounts"],
        ))
        .await;
    assert!(outcome.allowed, "{}", outcome.message());
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volcano_vgpu_pods_are_gpu_pods() {
    let c = cluster().await;
    let spec = json!({"schedulerName": "volcano",
        "tolerations": [{"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}],
        "containers": [{"name": "cuda", "image": "nvidia/cuda:12.4.1-base-ubuntu22.04", "command": ["sleep", "100"],
            "resources": {"limits": {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "3000"}}}]});
    let outcome = c.admit(&Review::create(pod("vgpu", spec))).await;
    assert!(outcome.allowed, "{}", outcome.message());
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpu_operator_validator_pods_in_another_namespace_are_allowed() {
    let c = cluster().await;
    // The validator makes its CUDA check pod on each GPU node, as its own
    // service account, in the namespace the operator was installed in.
    let validator = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "nvidia-cuda-validator-", "namespace": "nvidia-system",
            "labels": {"app": "nvidia-cuda-validator"}},
        "spec": {"nodeName": T4_NODE, "restartPolicy": "OnFailure", "serviceAccountName": "nvidia-operator-validator",
            "runtimeClassName": "nvidia",
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "initContainers": [{"name": "cuda-validation",
                "image": "nvcr.io/nvidia/cloud-native/gpu-operator-validator:v24.9.0",
                "command": ["sh", "-c"], "args": ["vectorAdd"]}],
            "containers": [{"name": "nvidia-cuda-validator",
                "image": "nvcr.io/nvidia/cloud-native/gpu-operator-validator:v24.9.0",
                "command": ["sh", "-c"], "args": ["echo cuda workload validation is successful"]}]}});
    let by_validator = |review: Review| {
        review.by(
            "system:serviceaccount:nvidia-system:nvidia-operator-validator",
            &[
                "system:serviceaccounts",
                "system:serviceaccounts:nvidia-system",
            ],
        )
    };
    let outcome = c
        .admit(&by_validator(
            Review::create(validator.clone())
                .namespace_labels(&[("gpu-admission.io/gpu-infrastructure", "true")]),
        ))
        .await;
    assert!(outcome.allowed, "{}", outcome.message());
    // Before an admin marks the namespace, the denial says how.
    let outcome = c
        .admit(&by_validator(Review::create(validator.clone())))
        .await;
    assert!(!outcome.allowed);
    // A person writing the same pod in the marked namespace is not the
    // validator.
    let outcome = c
        .admit(
            &Review::create(validator)
                .namespace_labels(&[("gpu-admission.io/gpu-infrastructure", "true")]),
        )
        .await;
    denied_by(&outcome, "gpu-visible-devices-leak");
    c.stop().await;
}

// ---------------------------------------------------------------------------
// Device-injection annotations other than cdi.k8s.io: the NVIDIA Container
// Toolkit's NRI plugin (the GPU Operator's CDI mode) and containerd's NRI
// device injector inject what they name into containers of any namespace.

/// A DaemonSet as a tenant writes it: one container, tolerating the GPU
/// taint so that it runs on every GPU node.
fn daemonset(namespace: &str, annotations: Value, container: Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "gpu-probe", "namespace": namespace},
        "spec": {"selector": {"matchLabels": {"app": "gpu-probe"}},
            "template": {"metadata": {"labels": {"app": "gpu-probe"}, "annotations": annotations},
                "spec": {
                    "tolerations": [{"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}],
                    "containers": [container]}}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_daemonset_asking_the_nri_plugin_for_every_gpu_is_denied() {
    let c = cluster().await;
    let probe = json!({"name": "probe", "image": "busybox:1.36", "command": ["sh", "-c", "sleep infinity"]});
    let ds = daemonset(
        "ml",
        json!({"nvidia.cdi.k8s.io/container.probe": "nvidia.com/gpu=all"}),
        probe.clone(),
    );
    let outcome = c.admit(&Review::create(ds)).await;
    assert_eq!(
        outcome.validated_by,
        ["workloads.validate.gpu-admission.io"]
    );
    denied_by(
        &outcome,
        "gpu-visible-devices-leak: DaemonSet gpu-probe: container probe gets nvidia.com/gpu=all (every GPU of the node) \
         from pod annotation nvidia.cdi.k8s.io/container.probe, which the NVIDIA Container Toolkit's NRI plugin injects \
         behind the scheduler's back though it asks for no GPU; remove the annotation and request GPUs in resources.limits",
    );
    // The infrastructure way out is named too.
    denied_by(&outcome, "labels gpu-admission.io/gpu-infrastructure=true");
    // Every spelling of the NRI plugin's annotation, and each kind of device.
    for (key, value) in [
        ("nvidia.cdi.k8s.io/container.*", "nvidia.com/gpu=0"),
        (
            "nvidia.cdi.k8s.io/pod",
            "nvidia.com/gpu=GPU-3f2a0c1e-7b1d-4c55-9f6e-0d2b8a1c4e77",
        ),
        ("nvidia.cdi.k8s.io", "nvidia.com/gpu=0:1"),
        (
            "cdi-devices.nri.io/container.probe",
            "- nvidia.com/mig-1g.10gb=0\n",
        ),
    ] {
        let outcome = c
            .admit(&Review::create(daemonset(
                "ml",
                json!({ key: value }),
                probe.clone(),
            )))
            .await;
        denied_by(&outcome, &format!("from pod annotation {key}"));
    }
    // Annotations that inject nothing into this pod's containers.
    for (key, value) in [
        ("nvidia.cdi.k8s.io/container.other", "nvidia.com/gpu=all"),
        ("nvidia.cdi.k8s.io/container.probe", "vendor.example/nic=0"),
    ] {
        let outcome = c
            .admit(&Review::create(daemonset(
                "ml",
                json!({ key: value }),
                probe.clone(),
            )))
            .await;
        assert!(
            !outcome.message().contains("gpu-visible-devices-leak"),
            "{key}: {}",
            outcome.message()
        );
    }
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_level_nri_annotations_and_the_device_injector_are_denied() {
    let c = cluster().await;
    // A CPU pod that asks for nothing else is still sent, for its annotation.
    let mut cpu = pod("nri-pod", json!({"containers": [cpu_container()]}));
    cpu["metadata"]["annotations"] = json!({"nvidia.cdi.k8s.io/pod": "nvidia.com/gpu=all"});
    let outcome = c.admit(&Review::create(cpu)).await;
    assert_eq!(outcome.validated_by, ["pods.validate.gpu-admission.io"]);
    denied_by(
        &outcome,
        "gpu-visible-devices-leak: container app gets nvidia.com/gpu=all (every GPU of the node) from pod annotation \
         nvidia.cdi.k8s.io/pod, which the NVIDIA Container Toolkit's NRI plugin injects",
    );

    // containerd's device injector: device nodes by path or by NVIDIA's major.
    for value in [
        "- path: /dev/nvidia0\n  type: c\n  major: 195\n  minor: 0\n",
        "- {path: /dev/gpu, type: c, major: 195, minor: 1}",
    ] {
        let mut nodes = pod("nri-nodes", json!({"containers": [cpu_container()]}));
        nodes["metadata"]["annotations"] = json!({"devices.nri.io/container.app": value});
        let outcome = c.admit(&Review::create(nodes)).await;
        assert_eq!(outcome.validated_by, ["pods.validate.gpu-admission.io"]);
        denied_by(
            &outcome,
            "from pod annotation devices.nri.io/container.app, which containerd's NRI device injector injects",
        );
    }
    // A device that is no GPU passes.
    let mut null = pod("nri-null", json!({"containers": [cpu_container()]}));
    null["metadata"]["annotations"] =
        json!({"devices.nri.io/pod": "- {path: /dev/null, type: c, major: 1, minor: 3}"});
    let outcome = c.admit(&Review::create(null)).await;
    assert!(outcome.allowed, "{}", outcome.message());

    // A GPU pod asking for a device beyond its own.
    let mut gpu = pod("nri-gpu", json!({"containers": [trainer("1")]}));
    gpu["metadata"]["annotations"] =
        json!({"nvidia.cdi.k8s.io/container.train": "nvidia.com/gpu=1"});
    let outcome = c.admit(&Review::create(gpu)).await;
    denied_by(
        &outcome,
        "container train gets nvidia.com/gpu=1 (GPU 1) from pod annotation nvidia.cdi.k8s.io/container.train, \
         which the NVIDIA Container Toolkit's NRI plugin injects behind the scheduler's back, beyond the GPUs the \
         device plugin gives it; remove the annotation: resources.limits is how the container gets its GPUs",
    );
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpu_infrastructure_with_nri_annotations_is_allowed_by_identity() {
    let c = cluster().await;
    // The GPU Operator's device plugin in CDI+NRI mode, as the operator
    // renders it.
    let plugin = json!({"name": "nvidia-device-plugin",
        "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0", "command": ["nvidia-device-plugin"]});
    let annotations = json!({"nvidia.cdi.k8s.io/container.nvidia-device-plugin": "management.nvidia.com/gpu=all"});
    for (namespace, labels) in [
        ("gpu-operator", vec![]),
        (
            "monitoring",
            vec![("gpu-admission.io/gpu-infrastructure", "true")],
        ),
    ] {
        let ds = daemonset(namespace, annotations.clone(), plugin.clone());
        let outcome = c.admit(&Review::create(ds).namespace_labels(&labels)).await;
        assert!(outcome.allowed, "{namespace}: {}", outcome.message());
    }
    // The same in a tenant's namespace: the image alone exempts nothing,
    // and the denial names the infrastructure fix.
    let outcome = c
        .admit(&Review::create(daemonset(
            "ml",
            annotations.clone(),
            plugin.clone(),
        )))
        .await;
    denied_by(
        &outcome,
        "container nvidia-device-plugin runs nvcr.io/nvidia/k8s-device-plugin, GPU infrastructure that must see every GPU",
    );
    denied_by(
        &outcome,
        "if it is not GPU infrastructure, remove the annotation nvidia.cdi.k8s.io/container.nvidia-device-plugin",
    );
    // In the operator's namespace, a container that is not infrastructure
    // is not carried through by the annotation.
    let probe = json!({"name": "nvidia-device-plugin", "image": "busybox:1.36"});
    let outcome = c
        .admit(&Review::create(daemonset(
            "gpu-operator",
            annotations,
            probe,
        )))
        .await;
    denied_by(
        &outcome,
        "from pod annotation nvidia.cdi.k8s.io/container.nvidia-device-plugin",
    );
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gpu_container_with_env_from_is_warned_with_the_node_side_fix() {
    let c = cluster().await;
    let mut train = trainer("1");
    train["envFrom"] = json!([{"secretRef": {"name": "training-env"}}]);
    let outcome = c
        .admit(&Review::create(pod(
            "env-from",
            json!({"containers": [train.clone()]}),
        )))
        .await;
    assert!(outcome.allowed, "{}", outcome.message());
    let warning = outcome
        .warnings
        .iter()
        .find(|w| w.starts_with("gpu-visible-devices-envfrom:"))
        .unwrap_or_else(|| panic!("no envFrom warning: {:?}", outcome.warnings));
    for text in [
        "container train asks for GPUs and takes envFrom a ConfigMap or Secret that may set NVIDIA_VISIBLE_DEVICES",
        "prefix: APP_",
        "DEVICE_LIST_STRATEGY=volume-mounts",
        "accept-nvidia-visible-devices-envvar-when-unprivileged=false",
    ] {
        assert!(warning.contains(text), "{text:?} not in {warning}");
    }
    // Not /mutate's to pin: the container's own GPUs would be hidden too.
    assert_eq!(env_of(&outcome, "/spec/containers/0/env"), Value::Null);
    // A prefix that cannot make the name: no warning.
    train["envFrom"] = json!([{"prefix": "APP_", "secretRef": {"name": "training-env"}}]);
    let outcome = c
        .admit(&Review::create(pod(
            "env-from",
            json!({"containers": [train]}),
        )))
        .await;
    assert!(outcome.allowed, "{}", outcome.message());
    assert!(
        !outcome
            .warnings
            .iter()
            .any(|w| w.starts_with("gpu-visible-devices-envfrom:")),
        "{:?}",
        outcome.warnings
    );
    c.stop().await;
}
