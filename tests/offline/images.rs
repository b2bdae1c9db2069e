//! Image automation's registry edge against a real registry (Debian's
//! docker-registry), images pushed and deleted by skopeo (a second client): tag
//! lists page by page and under a cap, a tag's digest as skopeo reads it, an image's
//! creation time as pushed, clear errors (wrong credentials, registry down, unknown
//! repository, tampered or malformed blobs) that never show a password, the real
//! registry's push notifications, and generic signed notifications.
//!
//! distribution 2.8 answers a tag list whole, whatever `n` says: the pages are
//! seen through the kit's paging front, which pages the registry's own list as the
//! distribution spec says.

use std::time::Duration;

use chrono::{TimeZone as _, Utc};
use tether_engine::image_automation::notification::{self, NotificationError, Pushed};
use tether_engine::image_automation::scan::{self, Listing};
use tether_engine::oci::{Access, Credentials, OciError, Registry};
use tether_testkit::registry::Registry as TestRegistry;

fn open(host: &str, repository: &str) -> Registry {
    let access = Access {
        credentials: None,
        insecure: true,
    };
    Registry::for_repository(host, repository, &access).unwrap()
}

/// The tag-list requests the registry's access log shows.
fn tag_list_requests(registry: &TestRegistry) -> usize {
    registry
        .requests()
        .iter()
        .filter(|line| line.contains("/tags/list"))
        .count()
}

fn pushed_at(day: u32) -> chrono::DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 3, day, 12, 30, 0).unwrap()
}

#[tokio::test]
async fn tags_are_listed_page_by_page_and_deleted_tags_are_gone() {
    let registry = TestRegistry::start();
    for (day, tag) in (1..).zip(["1.0.0", "1.1.0", "1.2.0", "2.0.0", "2.1.0"]) {
        registry.push_image("shop/app", tag, pushed_at(day));
    }
    let front = registry.paging_front();
    let before = tag_list_requests(&registry);
    let mut seen = Vec::new();
    let listing = scan::list_tags_in_pages(&open(&front.host(), "shop/app"), 2, 100, |tag| {
        seen.push(tag.to_string());
    })
    .await
    .unwrap();
    assert_eq!(seen, ["1.0.0", "1.1.0", "1.2.0", "2.0.0", "2.1.0"]);
    assert_eq!(
        listing,
        Listing {
            listed: 5,
            truncated: false,
            calls: 3
        }
    );
    assert_eq!(front.calls(), 3, "three pages asked of the front");
    assert_eq!(
        tag_list_requests(&registry) - before,
        3,
        "each page read the registry's list"
    );

    // Straight to the registry, which answers the list whole: one call.
    registry.delete_tag("shop/app", "1.1.0");
    let mut seen = Vec::new();
    let listing = scan::list_tags(&open(&registry.host(), "shop/app"), 100, |tag| {
        seen.push(tag.to_string());
    })
    .await
    .unwrap();
    seen.sort();
    assert_eq!(
        seen,
        ["1.0.0", "1.2.0", "2.0.0", "2.1.0"],
        "the deleted tag is gone"
    );
    assert_eq!((listing.listed, listing.calls), (4, 1));
}

#[tokio::test]
async fn a_repository_past_the_cap_is_listed_once_and_said_to_be_truncated() {
    let registry = TestRegistry::start();
    registry.push_image("shop/app", "t00000", pushed_at(1));
    registry.add_tags_in_storage(
        "shop/app",
        "t00000",
        (1..10_000).map(|i| format!("t{i:05}")),
    );
    let front = registry.paging_front();

    let mut count = 0;
    let listing = scan::list_tags(&open(&front.host(), "shop/app"), 5_000, |_| count += 1)
        .await
        .unwrap();
    assert_eq!(count, 5_000, "no tag past the cap is handed on");
    // Five pages of 1,000, then one tag asked for to see there are more.
    assert_eq!(
        listing,
        Listing {
            listed: 5_000,
            truncated: true,
            calls: 6
        }
    );

    let whole = scan::list_tags(&open(&registry.host(), "shop/app"), 5_000, |_| {})
        .await
        .unwrap();
    assert_eq!(
        (whole.listed, whole.truncated, whole.calls),
        (5_000, true, 1)
    );

    // Exactly at the cap is not truncated.
    let exact = scan::list_tags(&open(&front.host(), "shop/app"), 10_000, |_| {})
        .await
        .unwrap();
    assert_eq!((exact.listed, exact.truncated), (10_000, false));
}

#[tokio::test]
async fn a_tags_digest_is_the_one_skopeo_reads_and_its_creation_time_the_one_pushed() {
    let registry = TestRegistry::start();
    let pushed = registry.push_image("shop/app", "1.0.0", pushed_at(7));
    let client = open(&registry.host(), "shop/app");

    // tether's GETs of a manifest (skopeo's own requests are in the log too).
    let manifest_gets = |registry: &TestRegistry| {
        registry
            .requests()
            .iter()
            .filter(|line| {
                line.contains("\"GET /v2/shop/app/manifests/") && line.contains("tether/")
            })
            .count()
    };
    let digest = scan::digest_of(&client, "1.0.0").await.unwrap();
    assert_eq!(digest, skopeo_digest(&registry.host(), "shop/app:1.0.0"));
    assert_eq!(digest, pushed.manifest_digest);
    assert_eq!(
        manifest_gets(&registry),
        0,
        "a digest takes no manifest fetch"
    );

    assert_eq!(
        scan::created_at(&client, "1.0.0").await.unwrap(),
        Some(pushed_at(7))
    );

    // The tag moved: a new digest and a new time.
    let moved = registry.push_image("shop/app", "1.0.0", pushed_at(9));
    assert_ne!(moved.manifest_digest, pushed.manifest_digest);
    assert_eq!(
        scan::digest_of(&client, "1.0.0").await.unwrap(),
        moved.manifest_digest
    );
    assert_eq!(
        scan::created_at(&client, "1.0.0").await.unwrap(),
        Some(pushed_at(9))
    );
}

fn skopeo_digest(host: &str, image: &str) -> String {
    let out = std::process::Command::new("skopeo")
        .args(["inspect", "--tls-verify=false", "--format", "{{.Digest}}"])
        .arg(format!("docker://{host}/{image}"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// The error's whole chain, as a log would print it.
fn chain(error: &OciError) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}

#[tokio::test]
async fn wrong_credentials_a_registry_down_and_an_unknown_repository_are_clear() {
    let password = "correct-horse-battery";
    let registry = TestRegistry::start_for_user("robot", password);
    let wrong = Access {
        credentials: Some(Credentials {
            username: "robot".into(),
            password: "wrong-password-123".into(),
        }),
        insecure: true,
    };
    let client = Registry::for_repository(&registry.host(), "shop/app", &wrong).unwrap();
    let error = scan::list_tags(&client, 10, |_| {}).await.unwrap_err();
    assert!(
        matches!(error, OciError::Unauthorized { status: 401, .. }),
        "{error:?}"
    );
    let text = chain(&error);
    assert!(text.contains("refused the credentials"), "{text}");
    assert!(
        !text.contains("wrong-password-123")
            && !format!("{error:?}").contains("wrong-password-123")
    );

    let right = Access {
        credentials: Some(Credentials {
            username: "robot".into(),
            password: password.into(),
        }),
        insecure: true,
    };
    let client = Registry::for_repository(&registry.host(), "shop/app", &right).unwrap();
    let error = scan::list_tags(&client, 10, |_| {}).await.unwrap_err();
    assert!(matches!(error, OciError::NotFound { .. }), "{error:?}");
    assert_eq!(
        error.to_string(),
        format!(
            "{}/shop/app does not exist in the registry",
            registry.host()
        )
    );
    assert!(!chain(&error).contains(password));

    let down = format!("127.0.0.1:{}", tether_testkit::remote::free_port());
    let error = scan::list_tags(&open(&down, "shop/app"), 10, |_| {})
        .await
        .unwrap_err();
    assert!(matches!(error, OciError::Unreachable { .. }), "{error:?}");
    assert!(chain(&error).starts_with(&format!("cannot reach the registry of {down}/shop/app")));

    let error = scan::digest_of(&client, "../../etc").await.unwrap_err();
    assert!(
        error
            .to_string()
            .contains("the tag \"../../etc\" is malformed"),
        "{error}"
    );
}

#[tokio::test]
async fn a_tampered_blob_a_config_not_json_and_a_missing_tag_are_refused_clearly() {
    let registry = TestRegistry::start();
    let client = open(&registry.host(), "shop/app");
    let pushed = registry.push_image("shop/app", "1.0.0", pushed_at(1));
    std::fs::write(
        registry.blob_path(&pushed.config_digest),
        b"{\"created\":\"2030-01-01T00:00:00Z\"}",
    )
    .unwrap();
    let error = scan::created_at(&client, "1.0.0").await.unwrap_err();
    assert!(matches!(error, OciError::WrongDigest { .. }), "{error:?}");
    assert!(
        error.to_string().contains("nothing is read from it"),
        "{error}"
    );

    let pushed = registry.push_image("shop/app", "2.0.0", pushed_at(2));
    // Another valid manifest under the old one's digest: the registry serves it.
    let stored = registry.blob_path(&pushed.manifest_digest);
    let mut manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&stored).unwrap()).unwrap();
    manifest["annotations"] = serde_json::json!({"tampered": "yes"});
    std::fs::write(&stored, serde_json::to_vec(&manifest).unwrap()).unwrap();
    let error = scan::created_at(&client, "2.0.0").await.unwrap_err();
    assert!(matches!(error, OciError::WrongDigest { .. }), "{error:?}");

    registry.push_image_with_config("shop/app", "3.0.0", b"not json at all");
    let error = scan::created_at(&client, "3.0.0").await.unwrap_err();
    assert!(
        error.to_string().starts_with(&format!(
            "{}/shop/app: the image's config is malformed: not the JSON expected",
            registry.host()
        )),
        "{error}"
    );

    let error = scan::digest_of(&client, "9.9.9").await.unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "{}/shop/app:9.9.9 does not exist in the registry",
            registry.host()
        )
    );
}

#[tokio::test]
async fn the_registrys_own_notification_names_the_pushed_image() {
    let (sender, mut received) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
    let app = axum::Router::new().route(
        "/events",
        axum::routing::post(move |body: axum::body::Bytes| {
            let sender = sender.clone();
            async move {
                let _ = sender.send(body.to_vec());
                "ok"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/events", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let registry = TestRegistry::start_with_notifications(&url, &[]);
    let host = registry.host();
    let pushed = tokio::task::spawn_blocking(move || {
        let image = registry.push_image("shop/app", "1.4.0", pushed_at(3));
        (registry, image)
    })
    .await
    .unwrap();
    let (_registry, image) = pushed;

    let announced = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let body = received.recv().await.unwrap();
            let pushes = notification::docker_distribution(&body).unwrap();
            if !pushes.is_empty() {
                return pushes;
            }
        }
    })
    .await
    .expect("the registry announced the manifest's push within 30 s");
    assert_eq!(
        announced,
        [Pushed {
            registry: Some(host),
            repository: "shop/app".into(),
            tag: Some("1.4.0".into()),
            digest: Some(image.manifest_digest),
        }]
    );
}

#[test]
fn a_docker_envelope_gives_manifest_pushes_only_and_bad_bodies_are_refused() {
    let envelope = br#"{"events":[
        {"action":"push","target":{"mediaType":"application/octet-stream","digest":"sha256:aa","repository":"shop/app","url":"http://r:5000/v2/shop/app/blobs/sha256:aa"},"request":{"host":"r:5000"}},
        {"action":"pull","target":{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:bb","repository":"shop/app","tag":"1.0"},"request":{"host":"r:5000"}},
        {"action":"push","target":{"mediaType":"application/vnd.docker.distribution.manifest.v2+json","digest":"sha256:cc","repository":"shop/api","url":"https://reg.example:443/v2/shop/api/manifests/sha256:cc","tag":"2.0"},"request":{}}
    ]}"#;
    assert_eq!(
        notification::docker_distribution(envelope).unwrap(),
        [Pushed {
            registry: Some("reg.example:443".into()),
            repository: "shop/api".into(),
            tag: Some("2.0".into()),
            digest: Some("sha256:cc".into()),
        }]
    );
    let error = notification::docker_distribution(b"{\"events\": 3}").unwrap_err();
    assert!(
        error.to_string().starts_with(
            "the notification is not a Docker distribution notification envelope: invalid type"
        ),
        "{error}"
    );
    let huge = vec![b' '; notification::NOTIFICATION_BYTES + 1];
    assert_eq!(
        notification::docker_distribution(&huge).unwrap_err(),
        NotificationError::TooLarge {
            limit: notification::NOTIFICATION_BYTES
        }
    );
}

#[test]
fn a_generic_notification_is_taken_only_with_its_signature() {
    let key = b"webhook-key";
    let body = br#"{"image":"127.0.0.1:5000/shop/app","tag":"1.2.3"}"#;
    let signature = tether_core::feedback::notice::signature(body, key);
    assert_eq!(
        notification::generic(body, Some(&signature), key).unwrap(),
        Pushed {
            registry: Some("127.0.0.1:5000".into()),
            repository: "shop/app".into(),
            tag: Some("1.2.3".into()),
            digest: None,
        }
    );
    let other_key = tether_core::feedback::notice::signature(body, b"another key");
    assert_eq!(
        notification::generic(body, Some(&other_key), key).unwrap_err(),
        NotificationError::BadSignature
    );
    let tampered = br#"{"image":"127.0.0.1:5000/shop/app","tag":"6.6.6"}"#;
    assert_eq!(
        notification::generic(tampered, Some(&signature), key).unwrap_err(),
        NotificationError::BadSignature
    );
    assert_eq!(
        notification::generic(body, Some("sha256=zz"), key).unwrap_err(),
        NotificationError::BadSignature
    );
    let missing = notification::generic(body, None, key).unwrap_err();
    assert_eq!(missing, NotificationError::MissingSignature);
    assert!(missing.to_string().contains("X-Signature-256"));

    let no_tag = br#"{"image":"shop/app"}"#;
    let signed = tether_core::feedback::notice::signature(no_tag, key);
    let error = notification::generic(no_tag, Some(&signed), key).unwrap_err();
    assert!(
        error
            .to_string()
            .ends_with("it names neither a tag nor a digest"),
        "{error}"
    );
}

#[tokio::test]
async fn two_hundred_thousand_tags_are_folded_one_by_one() {
    let registry = TestRegistry::start();
    registry.push_image("shop/app", "t000000", pushed_at(1));
    registry.add_tags_in_storage(
        "shop/app",
        "t000000",
        (1..200_000).map(|i| format!("t{i:06}")),
    );
    let front = registry.paging_front();
    // The fold keeps only the previous tag: each is seen once, in the front's order.
    let mut previous = String::new();
    let mut in_order = true;
    let listing =
        scan::list_tags_in_pages(&open(&front.host(), "shop/app"), 10_000, 1_000_000, |tag| {
            in_order &= tag > previous.as_str();
            previous.clear();
            previous.push_str(tag);
        })
        .await
        .unwrap();
    assert!(in_order, "each tag once, none repeated");
    assert_eq!(previous, "t199999");
    assert_eq!(
        listing,
        Listing {
            listed: 200_000,
            truncated: false,
            calls: 20
        }
    );
}
