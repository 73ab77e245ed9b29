//! Kubernetes' CEL authorizer library (`library.Authz`): the `authorizer`
//! variable and its checks, answered by an [`Authorizer`].
//!
//! ```text
//! authorizer.group('apps').resource('deployments').namespace('ml').name('web').check('update').allowed()
//! authorizer.path('/healthz').check('get').reason()
//! authorizer.serviceAccount('ml', 'trainer').group('').resource('pods').check('create').errored()
//! authorizer.requestResource.check('delete').allowed()
//! ```
//!
//! Each distinct check is asked once per evaluated object; the answer is
//! cached for the rest of the request.
use crate::authz::{Attributes, Authorizer, Decision, ResourceTarget, Target, User};
use kube_cel::cel::extractors::This;
use kube_cel::cel::objects::{Key, Map, Opaque};
use kube_cel::cel::{Context, ExecutionError, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The map key under which the `authorizer` variable holds its checker
/// (the variable is a map so that `authorizer.requestResource` selects).
const SELF_KEY: &str = "@authorizer";

/// The `authorizer` variable for one evaluated object: checks for `user`,
/// and `requestResource` for the request's own resource.
pub fn variable(backend: Arc<dyn Authorizer>, user: User, request_resource: Target) -> Value {
    let checker = Checker(Arc::new(CheckerInner {
        backend,
        user,
        cache: Mutex::new(HashMap::new()),
    }));
    let target = match request_resource {
        Target::Resource(target) => target,
        Target::Path(_) => ResourceTarget::default(),
    };
    let request_check = ResourceCheck {
        checker: checker.clone(),
        target,
    };
    let entries = [
        (Key::from(SELF_KEY), Value::Opaque(Arc::new(checker))),
        (
            Key::from("requestResource"),
            Value::Opaque(Arc::new(request_check)),
        ),
    ];
    Value::Map(Map {
        map: Arc::new(entries.into_iter().collect()),
    })
}

/// Registers the library's functions.
pub fn register(ctx: &mut Context<'static>) {
    ctx.add_function("path", |This(t): This<Value>, path: Arc<String>| {
        let checker = checker_of(&t, "path")?;
        opaque(PathCheck {
            checker,
            path: path.to_string(),
        })
    });
    ctx.add_function("group", |This(t): This<Value>, group: Arc<String>| {
        let checker = checker_of(&t, "group")?;
        opaque(GroupCheck {
            checker,
            group: group.to_string(),
        })
    });
    ctx.add_function(
        "serviceAccount",
        |This(t): This<Value>, namespace: Arc<String>, name: Arc<String>| {
            let checker = checker_of(&t, "serviceAccount")?;
            opaque(Checker(Arc::new(CheckerInner {
                backend: checker.0.backend.clone(),
                user: User::service_account(&namespace, &name),
                cache: Mutex::new(HashMap::new()),
            })))
        },
    );
    ctx.add_function("resource", |This(t): This<Value>, resource: Arc<String>| {
        // `authorizer.resource(r)` (as the Kubernetes documentation writes
        // it for a service account) is the core group's.
        let (checker, group) = match downcast::<GroupCheck>(&t, "resource") {
            Ok(g) => (g.checker.clone(), g.group.clone()),
            Err(err) => (checker_of(&t, "resource").map_err(|_| err)?, String::new()),
        };
        let resource = resource.to_string();
        let target = ResourceTarget {
            group,
            resource,
            ..ResourceTarget::default()
        };
        opaque(ResourceCheck { checker, target })
    });
    // `subresource`, `namespace` and `name` each set one field of the target.
    type Field = fn(&mut ResourceTarget) -> &mut String;
    let fields: [(&'static str, Field); 3] = [
        ("subresource", |t| &mut t.subresource),
        ("namespace", |t| &mut t.namespace),
        ("name", |t| &mut t.name),
    ];
    for (function, field) in fields {
        ctx.add_function(function, move |This(t): This<Value>, s: Arc<String>| {
            let mut r = downcast::<ResourceCheck>(&t, function)?.clone();
            *field(&mut r.target) = s.to_string();
            opaque(r)
        });
    }
    ctx.add_function("check", |This(t): This<Value>, verb: Arc<String>| {
        let (checker, target) = if let Ok(r) = downcast::<ResourceCheck>(&t, "check") {
            (&r.checker, Target::Resource(r.target.clone()))
        } else {
            let p = downcast::<PathCheck>(&t, "check")?;
            (&p.checker, Target::Path(p.path.clone()))
        };
        opaque(DecisionVal(checker.check(verb.to_string(), target)))
    });
    ctx.add_function("allowed", |This(t): This<Value>| {
        Ok::<Value, ExecutionError>(Value::Bool(decision(&t, "allowed")?.allowed))
    });
    ctx.add_function("reason", |This(t): This<Value>| {
        let d = decision(&t, "reason")?;
        Ok::<Value, ExecutionError>(Value::String(Arc::new(d.reason.clone())))
    });
    ctx.add_function("errored", |This(t): This<Value>| {
        Ok::<Value, ExecutionError>(Value::Bool(decision(&t, "errored")?.error.is_some()))
    });
    ctx.add_function("error", |This(t): This<Value>| {
        let d = decision(&t, "error")?;
        let error = d.error.clone().unwrap_or_default();
        Ok::<Value, ExecutionError>(Value::String(Arc::new(error)))
    });
}

fn opaque(value: impl Opaque) -> Result<Value, ExecutionError> {
    Ok(Value::Opaque(Arc::new(value)))
}

fn downcast<'v, T: Opaque>(value: &'v Value, function: &str) -> Result<&'v T, ExecutionError> {
    match value {
        Value::Opaque(o) => o.downcast_ref::<T>(),
        _ => None,
    }
    .ok_or_else(|| ExecutionError::NotSupportedAsMethod {
        method: function.to_string(),
        target: value.clone(),
    })
}

/// The checker of `authorizer` (a map) or of `authorizer.serviceAccount(..)`.
fn checker_of(value: &Value, function: &str) -> Result<Checker, ExecutionError> {
    if let Value::Map(map) = value {
        if let Some(v) = map.map.get(&Key::from(SELF_KEY)) {
            return downcast::<Checker>(v, function).cloned();
        }
    }
    downcast::<Checker>(value, function).cloned()
}

fn decision<'v>(value: &'v Value, function: &str) -> Result<&'v Decision, ExecutionError> {
    downcast::<DecisionVal>(value, function).map(|d| &d.0)
}

/// Checks for one user, with the answers given so far.
#[derive(Clone)]
struct Checker(Arc<CheckerInner>);

struct CheckerInner {
    backend: Arc<dyn Authorizer>,
    user: User,
    cache: Mutex<HashMap<Attributes, Decision>>,
}

impl Checker {
    fn check(&self, verb: String, target: Target) -> Decision {
        let attributes = Attributes {
            user: self.0.user.clone(),
            verb,
            target,
        };
        let cached = self
            .0
            .cache
            .lock()
            .ok()
            .and_then(|c| c.get(&attributes).cloned());
        if let Some(decision) = cached {
            return decision;
        }
        let decision = self.0.backend.authorize(&attributes);
        if let Ok(mut cache) = self.0.cache.lock() {
            cache.insert(attributes, decision.clone());
        }
        decision
    }
}

impl std::fmt::Debug for Checker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Authorizer({})", self.0.user.username)
    }
}

impl PartialEq for Checker {
    fn eq(&self, other: &Checker) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Checker {}

impl Opaque for Checker {
    fn runtime_type_name(&self) -> &str {
        "kubernetes.authorization.Authorizer"
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct PathCheck {
    checker: Checker,
    path: String,
}

impl Opaque for PathCheck {
    fn runtime_type_name(&self) -> &str {
        "kubernetes.authorization.PathCheck"
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct GroupCheck {
    checker: Checker,
    group: String,
}

impl Opaque for GroupCheck {
    fn runtime_type_name(&self) -> &str {
        "kubernetes.authorization.GroupCheck"
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct ResourceCheck {
    checker: Checker,
    target: ResourceTarget,
}

impl Opaque for ResourceCheck {
    fn runtime_type_name(&self) -> &str {
        "kubernetes.authorization.ResourceCheck"
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct DecisionVal(Decision);

impl Opaque for DecisionVal {
    fn runtime_type_name(&self) -> &str {
        "kubernetes.authorization.Decision"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cel::{compile, evaluate, Env};
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Allows `alice` to do anything on `pods`, fails on the verb
    /// `explode`, and counts the checks it is asked.
    #[derive(Default)]
    struct Fake {
        asked: AtomicUsize,
    }

    impl Authorizer for Fake {
        fn authorize(&self, a: &Attributes) -> Decision {
            self.asked.fetch_add(1, Ordering::SeqCst);
            match (&a.target, a.verb.as_str()) {
                (_, "explode") => Decision::error("the authorizer is unreachable"),
                (Target::Resource(r), _) if r.resource == "pods" && a.user.username == "alice" => {
                    Decision::allow("alice may")
                }
                (Target::Path(p), "get") if p == "/healthz" => Decision::allow("public"),
                _ => Decision::deny("not alice"),
            }
        }
    }

    fn run(fake: &Arc<Fake>, user: &str, source: &str) -> Value {
        let env = Env::default();
        let compiled = compile(&env, source).unwrap_or_else(|e| panic!("{source}: {e}"));
        let mut ctx = env.scope();
        let target = Target::Resource(ResourceTarget {
            resource: "pods".into(),
            namespace: "ml".into(),
            name: "trainer".into(),
            ..ResourceTarget::default()
        });
        let user = User {
            username: user.into(),
            ..User::default()
        };
        let backend: Arc<dyn Authorizer> = fake.clone();
        ctx.add_variable_from_value("authorizer", variable(backend, user, target));
        evaluate(compiled.tree(), &ctx).unwrap_or_else(|e| panic!("{source}: {e}"))
    }

    /// The examples of the Kubernetes CEL documentation's authorizer
    /// library, against a fake authorizer.
    #[test]
    fn the_documented_checks_ask_the_authorizer() {
        let fake = Arc::new(Fake::default());
        for (user, source) in [
            // The three examples of the documentation's authorizer library.
            ("alice", "authorizer.group('').resource('pods').namespace('default').check('create').allowed()"),
            ("bob", "authorizer.path('/healthz').check('get').allowed()"),
            ("alice", "!authorizer.serviceAccount('default', 'myserviceaccount').resource('deployments').check('delete').allowed()"),
            ("bob", "authorizer.serviceAccount('default', 'myserviceaccount').resource('deployments').check('delete').reason() == 'not alice'"),
            ("alice", "authorizer.group('').resource('pods').subresource('status').namespace('ml').name('trainer').check('update').allowed()"),
            ("alice", "authorizer.requestResource.check('delete').allowed()"),
            ("alice", "authorizer.requestResource.check('delete').reason() == 'alice may'"),
            ("bob", "!authorizer.requestResource.check('delete').allowed()"),
            ("bob", "authorizer.path('/healthz').check('get').allowed()"),
            ("bob", "!authorizer.path('/metrics').check('get').allowed()"),
            ("bob", "!authorizer.serviceAccount('ml', 'trainer').group('').resource('pods').check('create').allowed()"),
            ("bob", "authorizer.group('').resource('pods').check('explode').errored()"),
            ("bob", "authorizer.group('').resource('pods').check('explode').error() == 'the authorizer is unreachable'"),
            ("bob", "!authorizer.group('').resource('pods').check('explode').allowed()"),
            ("alice", "!authorizer.group('').resource('pods').check('get').errored()"),
        ] {
            assert_eq!(run(&fake, user, source), Value::Bool(true), "{user}: {source}");
        }
    }

    #[test]
    fn a_check_is_asked_once_per_evaluated_object() {
        let fake = Arc::new(Fake::default());
        let source = "[1, 2, 3].all(i, authorizer.requestResource.check('update').allowed()) \
                      && authorizer.group('').resource('pods').namespace('ml').name('trainer').check('update').allowed()";
        assert_eq!(run(&fake, "alice", source), Value::Bool(true));
        assert_eq!(fake.asked.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn checks_on_the_wrong_values_are_errors() {
        let env = Env::default();
        for source in ["'x'.check('get')", "object.group('apps')", "1.allowed()"] {
            let compiled = compile(&env, source).unwrap();
            let mut ctx = env.scope();
            ctx.add_variable_from_value("object", Value::Int(1));
            assert!(evaluate(compiled.tree(), &ctx).is_err(), "{source}");
        }
    }
}
