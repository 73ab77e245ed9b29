use super::*;
use serde_json::json;

fn sources(doc: Value) -> TemplateSources {
    TemplateSources::new(read(&doc).expect("reads"))
}

fn source_doc(group: &str, kinds: Value) -> Value {
    json!({"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": "test"},
        "spec": {"group": group, "kinds": kinds}})
}

fn ray() -> TemplateSources {
    sources(source_doc(
        "ray.io",
        json!([{"kind": "RayCluster", "resource": "rayclusters", "templates": [
            {"path": "spec.headGroupSpec.template"},
            {"path": "spec.workerGroupSpecs[*].template", "key": "groupName",
             "replicas": ["spec.workerGroupSpecs[*].replicas"],
             "maxReplicas": ["spec.workerGroupSpecs[*].maxReplicas"]}
        ]}]),
    ))
}

fn pod(container: &str, gpus: &str) -> Value {
    json!({"spec": {"containers": [{"name": container, "image": "rayproject/ray:2.41.0-gpu",
        "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}})
}

#[test]
fn every_template_of_a_raycluster_is_found_and_named() {
    let rc = json!({"apiVersion": "ray.io/v1", "kind": "RayCluster",
    "metadata": {"name": "rc", "namespace": "llm"},
    "spec": {"headGroupSpec": {"template": pod("ray-head", "0")},
        "workerGroupSpecs": [
            {"groupName": "gpu-workers", "replicas": 2, "maxReplicas": 4, "template": pod("ray-worker", "8")},
            {"replicas": 3, "template": pod("cpu-worker", "0")}
        ]}});
    let found = ray().templates(&rc).unwrap();
    let labels: Vec<&str> = found.iter().map(|t| t.label.as_str()).collect();
    assert_eq!(
        labels,
        [
            "headGroupSpec",
            "workerGroupSpecs[gpu-workers]",
            "workerGroupSpecs[1]"
        ]
    );
    assert_eq!((found[0].replicas, found[0].max_replicas), (1, 1));
    assert_eq!((found[1].replicas, found[1].max_replicas), (2, 4));
    // No maxReplicas: the count it has.
    assert_eq!((found[2].replicas, found[2].max_replicas), (3, 3));
    assert_eq!(found[1].template, pod("ray-worker", "8"));
    assert_eq!(
        found[0].pointer.as_deref(),
        Some("/spec/headGroupSpec/template")
    );
    assert_eq!(
        found[2].pointer.as_deref(),
        Some("/spec/workerGroupSpecs/1/template")
    );
    // Another group, or a kind no document names: not a workload.
    let other = json!({"apiVersion": "example.com/v1", "kind": "RayCluster", "spec": {}});
    assert_eq!(ray().templates(&other), None);
    assert!(!ray().is_workload(&other));
    // A RayCluster without worker groups has its head.
    let head_only = json!({"apiVersion": "ray.io/v1", "kind": "RayCluster",
        "spec": {"headGroupSpec": {"template": pod("ray-head", "0")}}});
    assert_eq!(ray().templates(&head_only).unwrap().len(), 1);
}

#[test]
fn built_in_controllers_have_their_one_template_and_replicas() {
    let d = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": 3, "template": pod("web", "1")}});
    let found = TemplateSources::default().templates(&d).unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].label, "");
    assert_eq!(found[0].replicas, 3);
    let job = json!({"apiVersion": "batch/v1", "kind": "Job",
        "spec": {"parallelism": 4, "template": pod("train", "2")}});
    assert_eq!(
        TemplateSources::default().templates(&job).unwrap()[0].replicas,
        4
    );
    let pod_object = json!({"apiVersion": "v1", "kind": "Pod", "spec": {}});
    assert_eq!(TemplateSources::default().templates(&pod_object), None);
}

#[test]
fn map_wildcards_name_the_key_and_replicas_multiply() {
    let s = sources(source_doc(
        "kubeflow.org",
        json!([{"kind": "PyTorchJob", "resource": "pytorchjobs", "templates": [
            {"path": "spec.pytorchReplicaSpecs.*.template",
             "replicas": ["spec.pytorchReplicaSpecs.*.replicas"],
             "maxReplicas": ["spec.elasticPolicy.maxReplicas"]}]}]),
    ));
    let job = json!({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "spec": {"pytorchReplicaSpecs": {
            "Master": {"replicas": 1, "template": pod("pytorch", "1")},
            "Worker": {"replicas": "3", "template": pod("pytorch", "1")}}}});
    let found = s.templates(&job).unwrap();
    let got: Vec<(&str, i64)> = found
        .iter()
        .map(|t| (t.label.as_str(), t.replicas))
        .collect();
    assert_eq!(
        got,
        [
            ("pytorchReplicaSpecs.Master", 1),
            ("pytorchReplicaSpecs.Worker", 3)
        ]
    );

    let lws = sources(source_doc(
        "leaderworkerset.x-k8s.io",
        json!([{"kind": "LeaderWorkerSet", "resource": "leaderworkersets", "templates": [
            {"path": "spec.leaderWorkerTemplate.workerTemplate",
             "replicas": ["spec.replicas", "spec.leaderWorkerTemplate.size - 1"]}]}]),
    ));
    let set = json!({"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": 4, "workerTemplate": pod("w", "8")}}});
    let found = lws.templates(&set).unwrap();
    assert_eq!(found[0].label, "leaderWorkerTemplate.workerTemplate");
    assert_eq!(found[0].replicas, 6);
}

#[test]
fn inline_pod_specs_take_containers_from_their_own_fields() {
    let s = sources(source_doc(
        "argoproj.io",
        json!([{"kind": "Workflow", "resource": "workflows", "templates": [
            {"path": "spec.templates[*]", "shape": "PodSpec", "podDefaults": "spec",
             "podSpecPatch": "podSpecPatch", "containers": [
                {"path": "container", "name": "main"},
                {"path": "script", "name": "main"},
                {"path": "sidecars[*]"}]}]}]),
    ));
    let wf = json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
    "spec": {"nodeSelector": {"pool": "cpu"}, "tolerations": [{"key": "sku", "operator": "Exists"}],
    "entrypoint": "steps", "templates": [
        {"name": "steps", "steps": [[{"name": "a", "template": "train"}]]},
        {"name": "train", "nodeSelector": {"sku": "gpu"}, "metadata": {"labels": {"team": "a"}},
         "container": {"image": "pytorch", "resources": {"limits": {"nvidia.com/gpu": "1"}}},
         "sidecars": [{"name": "log", "image": "fluent-bit"}],
         "retryStrategy": {"limit": 2}}
    ]}});
    let found = s.templates(&wf).unwrap();
    // The steps template makes no pod of its own.
    assert_eq!(found.len(), 1);
    // A podSpecPatch merges into the main container by name.
    let mut patched = wf.clone();
    patched["spec"]["templates"][1]["podSpecPatch"] =
        json!("containers:\n  - name: main\n    resources:\n      limits: {nvidia.com/gpu: 2}\n");
    let t = &s.templates(&patched).unwrap()[0].template;
    assert_eq!(
        t["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"],
        2
    );
    assert_eq!(t["spec"]["containers"][0]["image"], "pytorch");
    assert_eq!(t["spec"]["containers"].as_array().unwrap().len(), 2);
    assert_eq!(found[0].label, "templates[train]");
    // An inline pod spec is not a pod template in the object.
    assert_eq!(found[0].pointer, None);
    assert_eq!(
        found[0].template,
        json!({"metadata": {"labels": {"team": "a"}}, "spec": {
            "nodeSelector": {"sku": "gpu"},
            "tolerations": [{"key": "sku", "operator": "Exists"}],
            "containers": [
                {"name": "main", "image": "pytorch", "resources": {"limits": {"nvidia.com/gpu": "1"}}},
                {"name": "log", "image": "fluent-bit"}]}})
    );

    let trainer = sources(source_doc(
        "trainer.kubeflow.org",
        json!([{"kind": "TrainJob", "resource": "trainjobs", "templates": [
            {"path": "spec.trainer", "shape": "PodSpec",
             "containers": [{"path": ".", "name": "node", "resources": "resourcesPerNode"}],
             "replicas": ["spec.trainer.numNodes"]}]}]),
    ));
    let tj = json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "spec": {"trainer": {"image": "train:1", "numNodes": 2,
            "resourcesPerNode": {"limits": {"nvidia.com/gpu": "16"}}}}});
    let found = trainer.templates(&tj).unwrap();
    assert_eq!(found[0].label, "trainer");
    assert_eq!(found[0].replicas, 2);
    let c = &found[0].template["spec"]["containers"][0];
    assert_eq!(c["name"], "node");
    assert_eq!(c["resources"]["limits"]["nvidia.com/gpu"], "16");
    assert!(c.get("resourcesPerNode").is_none());
}

#[test]
fn mistakes_in_a_document_name_their_field() {
    let errors = |group: &str, kinds: Value| -> Vec<String> {
        let errors = read(&source_doc(group, kinds)).unwrap_err();
        errors.iter().map(ToString::to_string).collect()
    };
    let ray = |resource: &str, template: Value| {
        let kinds = json!([{"kind": "RayCluster", "resource": resource, "templates": [template]}]);
        errors("ray.io", kinds)
    };
    let e = ray(
        "rayclusters",
        json!({"path": "spec.workerGroupSpecs[0].template"}),
    );
    assert!(
        e[0].starts_with("spec.kinds[0].templates[0].path: ") && e[0].contains("only [*]"),
        "{e:?}"
    );
    let e = ray("rayclusters", json!({"path": "spec..template"}));
    assert!(e[0].contains("an empty field"), "{e:?}");
    let e = ray(
        "rayclusters",
        json!({"path": "spec.head.template", "replicas": ["spec.groups[*].replicas"]}),
    );
    assert!(
        e[0].starts_with("spec.kinds[0].templates[0].replicas[0]: "),
        "{e:?}"
    );
    let e = ray(
        "RayClusters",
        json!({"path": "spec.head.template", "shape": "Pod"}),
    );
    assert!(e[0].contains("shape"), "{e:?}");
    let e = ray("RayClusters", json!({"path": "spec.head.template"}));
    assert_eq!(
        e,
        ["spec.kinds[0].resource: required: the plural resource name in lower case (e.g. rayclusters)"]
    );
    let e = ray(
        "rayclusters",
        json!({"path": "spec.head.template", "replica": ["x"]}),
    );
    assert!(e[0].contains("replica"), "{e:?}");
    let e = errors(
        "batch",
        json!([{"kind": "Job", "resource": "jobs", "templates": [{"path": "spec.template"}]}]),
    );
    assert_eq!(
        e,
        ["spec.kinds[0].kind: batch/Job is a built-in controller whose pod template is always judged"]
    );
}

#[test]
fn holds_nothing_when_names_finished_states_by_value_or_condition() {
    let s = sources(source_doc(
        "kubeflow.org",
        json!([{"kind": "PyTorchJob", "resource": "pytorchjobs",
        "templates": [{"path": "spec.pytorchReplicaSpecs.*.template"}],
        "holdsNothingWhen": [
            {"path": "status.conditions[*].type", "values": ["Succeeded", "Failed"]},
            {"path": "spec.runPolicy.suspend", "values": ["true"]}
        ]}]),
    ));
    let job = |status: Value, suspend: bool| {
        json!({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "spec": {"runPolicy": {"suspend": suspend}}, "status": status})
    };
    let source = s.custom().first().unwrap();
    let running = json!({"conditions": [{"type": "Created", "status": "True"}, {"type": "Running", "status": "True"}]});
    let done = json!({"conditions": [{"type": "Running", "status": "False"}, {"type": "Succeeded", "status": "True"}]});
    assert!(!source.holds_nothing(&job(running.clone(), false)));
    assert!(source.holds_nothing(&job(done, false)));
    assert!(
        source.holds_nothing(&job(running, true)),
        "a boolean matches \"true\""
    );
    assert!(!source.holds_nothing(&job(Value::Null, false)));
}

#[test]
fn holds_nothing_when_needs_a_path_and_values() {
    let errors = read(&source_doc(
        "ray.io",
        json!([{"kind": "RayJob", "resource": "rayjobs",
        "templates": [{"path": "spec.submitterPodTemplate"}],
        "holdsNothingWhen": [
            {"path": "", "values": ["Complete"]},
            {"path": "status.jobDeploymentStatus", "values": []},
            {"path": "status[0]", "values": ["x"]}
        ]}]),
    ))
    .unwrap_err();
    let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "spec.kinds[0].holdsNothingWhen[0].path",
            "spec.kinds[0].holdsNothingWhen[1].values",
            "spec.kinds[0].holdsNothingWhen[2].path"
        ],
        "{errors:?}"
    );
}
