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

/// The shipped sources (policies/workload-kinds.yaml).
fn shipped() -> TemplateSources {
    let text = include_str!("../../../policies/workload-kinds.yaml");
    let documents = serde_yaml::Deserializer::from_str(text);
    let values = documents.map(|d| Value::deserialize(d).expect("YAML"));
    TemplateSources::new(values.flat_map(|v| read(&v).expect("reads")).collect())
}

#[test]
fn a_trainjob_takes_the_overrides_and_patches_that_target_its_trainer() {
    let t4 = json!({"node.kubernetes.io/instance-type": "Standard_NC4as_T4_v3"});
    let gpu = json!([{"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]);
    let tj = |extra: Value| {
        let mut spec = json!({"runtimeRef": {"name": "torch-distributed"},
            "trainer": {"image": "train:1", "numNodes": 2,
                "resourcesPerNode": {"limits": {"nvidia.com/gpu": "2"}}}});
        spec.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": "tj", "namespace": "ml"}, "spec": spec})
    };
    let spec_of = |o: Value| shipped().templates(&o).unwrap()[0].template["spec"].clone();
    // v2.0: the override's own fields; the one for the initializer is not the trainer's.
    let s = spec_of(tj(json!({"podSpecOverrides": [
        {"targetJobs": [{"name": "dataset-initializer"}], "nodeSelector": {"pool": "cpu"}},
        {"targetJobs": [{"name": "node"}], "nodeSelector": t4, "tolerations": gpu,
         "containers": [{"name": "node", "env": [{"name": "NCCL_DEBUG", "value": "INFO"}]}]}]})));
    assert_eq!(s["nodeSelector"], t4);
    assert_eq!(s["tolerations"], gpu);
    assert!(s.get("targetJobs").is_none());
    let node = &s["containers"][0];
    assert_eq!(
        (&node["name"], &node["image"]),
        (&json!("node"), &json!("train:1"))
    );
    assert_eq!(
        node["env"],
        json!([{"name": "NCCL_DEBUG", "value": "INFO"}])
    );
    assert_eq!(node["resources"]["limits"]["nvidia.com/gpu"], "2");
    // v2.1: a pod template; later entries win.
    let s = spec_of(tj(json!({"podTemplateOverrides": [
        {"targetJobs": [{"name": "node"}], "spec": {"nodeSelector": {"pool": "a"}}},
        {"targetJobs": [{"name": "node"}], "spec": {"nodeSelector": t4}}]})));
    assert_eq!(
        s["nodeSelector"],
        json!({"pool": "a", "node.kubernetes.io/instance-type": "Standard_NC4as_T4_v3"})
    );
    // runtimePatches: per replicated job, by name.
    let job = |name: &str, spec: Value| json!({"name": name, "template": {"spec": {"template": {"spec": spec}}}});
    let s = spec_of(tj(
        json!({"runtimePatches": [{"manager": "kueue.x-k8s.io/manager",
        "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
            job("launcher", json!({"nodeSelector": {"pool": "cpu"}})),
            job("node", json!({"nodeSelector": t4, "containers": [{"name": "node",
                "securityContext": {"privileged": true},
                "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}]}]}))]}}}}]}),
    ));
    assert_eq!(s["nodeSelector"], t4);
    assert_eq!(s["containers"].as_array().unwrap().len(), 1);
    assert_eq!(s["containers"][0]["securityContext"]["privileged"], true);
    assert_eq!(
        s["containers"][0]["volumeMounts"][0]["mountPath"],
        "/dev/shm"
    );
}

#[test]
fn argo_merges_the_workflow_patch_then_the_templates_into_every_pod_template() {
    let wf = json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
        "metadata": {"name": "wf", "namespace": "ml"},
        "spec": {"entrypoint": "main",
            "podSpecPatch": "containers:\n  - name: main\n    securityContext: {privileged: true}\n    env: [{name: A, value: wf}, {name: B, value: wf}]\n",
            "templates": [
                {"name": "main", "steps": [[{"name": "a", "template": "train"}]]},
                {"name": "train", "container": {"image": "pytorch", "env": [{"name": "C", "value": "c"}]},
                 "podSpecPatch": "{\"containers\": [{\"name\": \"main\", \"env\": [{\"name\": \"B\", \"value\": \"tpl\"}]}]}"},
                {"name": "eval", "script": {"image": "python", "source": "print(1)"}}]}});
    let found = shipped().templates(&wf).unwrap();
    assert_eq!(found.len(), 2);
    for t in &found {
        assert_eq!(t.unreadable, None);
        assert_eq!(
            t.template["spec"]["containers"][0]["securityContext"]["privileged"],
            true
        );
    }
    // env merges by name: the template's patch wins over the workflow's.
    assert_eq!(
        found[0].template["spec"]["containers"][0]["env"],
        json!([{"name": "C", "value": "c"}, {"name": "A", "value": "wf"}, {"name": "B", "value": "tpl"}])
    );
    // A patch that cannot be read is said, never guessed at.
    let mut bad = wf.clone();
    bad["spec"]["podSpecPatch"] = json!("containers:\n  - name: main\n   image: [");
    let found = shipped().templates(&bad).unwrap();
    let problem = found[0].unreadable.as_deref().unwrap();
    assert!(
        problem.starts_with("spec.podSpecPatch is neither YAML nor JSON ("),
        "{problem}"
    );
    bad["spec"]["podSpecPatch"] = json!("[1, 2]");
    let found = shipped().templates(&bad).unwrap();
    assert_eq!(
        found[0].unreadable.as_deref(),
        Some("spec.podSpecPatch is not a pod spec: a map of pod-spec fields, in YAML or JSON")
    );
    // Argo fills {{...}} in before it merges: the rest is still read.
    bad["spec"]["podSpecPatch"] = json!("containers:\n  - name: main\n    securityContext: {privileged: true}\n    resources: {limits: {memory: {{inputs.parameters.mem}}}}\n");
    let found = shipped().templates(&bad).unwrap();
    assert_eq!(found[0].unreadable, None);
    assert_eq!(
        found[0].template["spec"]["containers"][0]["securityContext"]["privileged"],
        true
    );
    bad["spec"]["podSpecPatch"] = json!("{{workflow.parameters.patch}}");
    let found = shipped().templates(&bad).unwrap();
    assert_eq!(found[0].unreadable, None);
    assert!(found[0].template["spec"]["containers"][0]
        .get("securityContext")
        .is_none());
}

#[test]
fn a_spark_application_asks_its_gpus_as_name_and_quantity_per_executor() {
    let app = json!({"apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
        "metadata": {"name": "etl", "namespace": "ml"},
        "spec": {"type": "Scala", "image": "spark-rapids:24.10", "nodeSelector": {"pool": "spark"},
            "driver": {"cores": 1, "memory": "4g", "serviceAccount": "spark"},
            "executor": {"instances": 4, "cores": 3, "coreRequest": "2500m", "memory": "512m",
                "gpu": {"name": "nvidia.com/gpu", "quantity": 1},
                "securityContext": {"privileged": true}, "podSecurityContext": {"runAsUser": 0}},
            "dynamicAllocation": {"enabled": true, "maxExecutors": 10}}});
    let found = shipped().templates(&app).unwrap();
    let labels: Vec<&str> = found.iter().map(|t| t.label.as_str()).collect();
    assert_eq!(labels, ["driver", "executor"]);
    assert_eq!((found[1].replicas, found[1].max_replicas), (4, 10));
    let driver = &found[0].template["spec"];
    assert_eq!(driver["containers"][0]["name"], "spark-kubernetes-driver");
    assert_eq!(
        driver["containers"][0]["resources"],
        json!({"requests": {"cpu": "1", "memory": "4Gi"}})
    );
    assert_eq!(driver["nodeSelector"], json!({"pool": "spark"}));
    let executor = &found[1].template["spec"];
    let c = &executor["containers"][0];
    assert_eq!(c["name"], "spark-kubernetes-executor");
    assert_eq!(
        c["resources"],
        json!({"limits": {"nvidia.com/gpu": "1"},
            "requests": {"nvidia.com/gpu": "1", "cpu": "2500m", "memory": "512Mi"}})
    );
    assert_eq!(c["securityContext"]["privileged"], true);
    assert_eq!(executor["securityContext"], json!({"runAsUser": 0}));
    for (jvm, quantity) in [
        ("2048", Some("2048Mi")),
        ("1G", Some("1Gi")),
        ("64kb", Some("64Ki")),
        ("1.5g", None),
    ] {
        assert_eq!(jvm_size(jvm).as_deref(), quantity, "{jvm}");
    }
}

#[test]
fn mistakes_in_patches_and_resource_pairs_name_their_field() {
    let errors = |template: Value| -> Vec<String> {
        let kinds = json!([{"kind": "Thing", "resource": "things", "templates": [template]}]);
        let errors = read(&source_doc("example.com", kinds)).unwrap_err();
        errors.iter().map(ToString::to_string).collect()
    };
    let e = errors(
        json!({"path": "spec.template", "patches": [{"path": "spec.overrides[*]",
        "when": {"path": "spec.overrides[*].target", "values": []}}]}),
    );
    assert_eq!(e.len(), 1);
    assert!(
        e[0].starts_with("spec.kinds[0].templates[0].patches[0].when.values: "),
        "{e:?}"
    );
    let e = errors(
        json!({"path": "spec.worker", "shape": "PodSpec", "containers": [
        {"path": ".", "resourcePairs": [{"quantity": "gpu.quantity"},
            {"resource": "cpu", "quantity": "cores", "units": "bytes"}]}]}),
    );
    assert!(
        e[0].starts_with(
            "spec.kinds[0].templates[0].containers[0].resourcePairs[0]: either resource"
        ),
        "{e:?}"
    );
    assert!(
        e[1].starts_with("spec.kinds[0].templates[0].containers[0].resourcePairs[1].units: "),
        "{e:?}"
    );
    let e = errors(
        json!({"path": "spec.template", "podFields": {"securityContext": "podSecurityContext"}}),
    );
    assert!(
        e[0].starts_with("spec.kinds[0].templates[0].podFields.securityContext: "),
        "{e:?}"
    );
}
