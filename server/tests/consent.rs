//! Consent and bounds of shared spaces (PROTOCOL §3c), over real HTTP, on
//! SQLite and on PostgreSQL: an owner's adding of another user is an
//! invitation that costs the invitee nothing until they accept it; any
//! member can leave; invitations lapse and are capped per inviter and per
//! invitee; a user's spaces, owned spaces and a space's members are capped;
//! every list is paged; a members listing never waits for a write.
//! Each test failed against the server before invitations existed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

/// A server on a fresh database with `tune` applied to its configuration.
async fn server_with(b: Backend, tune: impl FnOnce(&mut marksync_server::Config)) -> Option<TestServer> {
    let database = fresh_database(b).await?;
    let mut c = config(&database);
    tune(&mut c);
    Some(TestServer::start(c).await.owning_database())
}

fn error_code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or("")
}

/// Nobody is put into a space against their will: an owner's add is an
/// invitation; until bob accepts, his pull, list of spaces, pushes and the
/// space's member list are as if nothing happened. Accepting joins him
/// (and again answers the same); a declined or withdrawn invitation is gone.
async fn an_invitation_costs_the_invitee_nothing_until_accepted(b: Backend) {
    let Some(t) = TestServer::new(b).await else { return };
    post(&t, "/v1/spaces", "alice", json!({"space": "diary"})).await;
    t.push_ok("alice", &[in_space("diary", full("a:1", "s-1", 10, 5))]).await;
    let unchanged = |mut answer: Value| {
        answer.as_object_mut().unwrap().remove("now");
        answer
    };
    let before = unchanged(pull(&t, "bob", json!({})).await);

    let (status, body) = invite(&t, "alice", "diary", "bob", json!("viewer")).await;
    assert_eq!((status, &body), (200, &json!({"user": "bob", "role": "viewer", "invited": true})));
    assert_eq!(unchanged(pull(&t, "bob", json!({})).await), before, "bob's pull is unchanged");
    let (_, mine) = get(&t, "/v1/spaces", "bob").await;
    assert_eq!(mine["spaces"], json!([{"space": "~bob", "role": "owner"}]));
    let v = t.push_ok("bob", &[in_space("diary", op("b:1", "s-1", 20, json!({"reps": 9})))]).await;
    assert_eq!(v[0]["code"], "forbidden");
    let (_, members) = get(&t, "/v1/spaces/members?space=diary", "alice").await;
    assert_eq!(members["members"], json!([{"user": "alice", "role": "owner"}]));
    assert_eq!(get(&t, "/v1/spaces/members?space=diary", "bob").await.0, 403);

    let (status, list) = get(&t, "/v1/invitations", "bob").await;
    assert_eq!(status, 200);
    let invitations = list["invitations"].as_array().unwrap();
    assert_eq!(invitations.len(), 1);
    assert_eq!(
        (&invitations[0]["space"], &invitations[0]["role"], &invitations[0]["from"]),
        (&json!("diary"), &json!("viewer"), &json!("alice"))
    );
    assert!(invitations[0]["expiresAt"].as_u64().unwrap() > 1_700_000_000_000);

    assert_eq!(accept(&t, "bob", "diary").await, (200, json!({"space": "diary", "role": "viewer"})));
    assert_eq!(accept(&t, "bob", "diary").await, (200, json!({"space": "diary", "role": "viewer"})), "again: the same");
    let joined = pull(&t, "bob", json!({"~bob": {"cursor": 0, "role": "owner"}})).await;
    assert_eq!(joined["joined"], json!([{"space": "diary", "role": "viewer"}]));
    assert_eq!(joined["spaces"][0]["changes"][0]["rowId"], "s-1");
    assert_eq!(get(&t, "/v1/invitations", "bob").await.1, json!({"invitations": []}));

    // A member's role changes at once: they consented to the space already.
    assert_eq!(invite(&t, "alice", "diary", "bob", json!("editor")).await.1, json!({"user": "bob", "role": "editor"}));

    // Declined, or withdrawn by the owner: gone, and accepting finds nothing.
    invite(&t, "alice", "diary", "carol", json!("editor")).await;
    assert_eq!(post(&t, "/v1/invitations/decline", "carol", json!({"space": "diary"})).await.0, 200);
    let (status, body) = accept(&t, "carol", "diary").await;
    assert_eq!((status, error_code(&body)), (404, "not_found"), "{body}");
    invite(&t, "alice", "diary", "dave", json!("editor")).await;
    assert_eq!(invite(&t, "alice", "diary", "dave", Value::Null).await.0, 200);
    assert_eq!(get(&t, "/v1/invitations", "dave").await.1, json!({"invitations": []}));
    assert_eq!(accept(&t, "dave", "diary").await.0, 404);
    // Only an owner invites; an invitation to a space that does not exist is refused the same way.
    assert_eq!(invite(&t, "bob", "diary", "erin", json!("viewer")).await.0, 403);
    assert_eq!(invite(&t, "bob", "nowhere", "erin", json!("viewer")).await.0, 403);
    t.stop().await;
}
both!(an_invitation_costs_the_invitee_nothing_until_accepted);

/// Any member leaves any space with `role: null` on themself, and the
/// space's rows leave their next pull; the last owner cannot leave.
async fn any_member_can_leave_but_the_last_owner(b: Backend) {
    let Some(t) = TestServer::new(b).await else { return };
    post(&t, "/v1/spaces", "alice", json!({"space": "club"})).await;
    invite(&t, "alice", "club", "vic", json!("viewer")).await;
    accept(&t, "vic", "club").await;
    let follows = json!({"club": {"cursor": 0, "role": "viewer"}});
    assert_eq!(pull(&t, "vic", follows.clone()).await["left"], json!([]));
    assert_eq!(invite(&t, "vic", "club", "vic", Value::Null).await, (200, json!({"user": "vic", "role": null})));
    assert_eq!(pull(&t, "vic", follows).await["left"], json!(["club"]));
    assert_eq!(invite(&t, "vic", "club", "vic", Value::Null).await.0, 200, "leaving again: nothing to do");
    assert_eq!(invite(&t, "vic", "club", "alice", Value::Null).await.0, 403, "a viewer removes only themself");
    let (status, body) = invite(&t, "alice", "club", "alice", Value::Null).await;
    assert_eq!((status, error_code(&body)), (409, "conflict"), "the last owner stays: {body}");
    // `POST /v1/spaces/leave` says the same in fewer words.
    invite(&t, "alice", "club", "ann", json!("editor")).await;
    accept(&t, "ann", "club").await;
    assert_eq!(post(&t, "/v1/spaces/leave", "ann", json!({"space": "club"})).await, (200, json!({"space": "club"})));
    assert_eq!(pull(&t, "ann", json!({"club": {"cursor": 0, "role": "editor"}})).await["left"], json!(["club"]));
    assert_eq!(post(&t, "/v1/spaces/leave", "alice", json!({"space": "club"})).await.0, 409);
    t.stop().await;
}
both!(any_member_can_leave_but_the_last_owner);

/// An invitation speaks with its inviter's authority: when they stop
/// managing the space's members — made an editor, removed, or leaving —
/// the invitations they sent to it are withdrawn with their role (not
/// listed, not accepted), and the other owners' stand. Kept, a removed
/// owner's invitation of a second account of theirs as owner was a way back
/// in that the owners left could not even see. One stored by an older server
/// after its inviter lost the role is refused when accepted, and is gone.
async fn an_invitation_lapses_with_its_inviters_ownership(b: Backend) {
    let Some(t) = TestServer::new(b).await else { return };
    post(&t, "/v1/spaces", "alice", json!({"space": "gym"})).await;
    for co in ["bob", "cid"] {
        invite(&t, "alice", "gym", co, json!("owner")).await;
        accept(&t, co, "gym").await;
    }
    invite(&t, "alice", "gym", "ann", json!("viewer")).await;
    invite(&t, "bob", "gym", "bob2", json!("owner")).await;
    invite(&t, "bob", "gym", "eve", json!("editor")).await;
    invite(&t, "cid", "gym", "cid2", json!("owner")).await;
    // bob is made an editor; cid leaves.
    assert_eq!(invite(&t, "alice", "gym", "bob", json!("editor")).await.0, 200);
    assert_eq!(post(&t, "/v1/spaces/leave", "cid", json!({"space": "gym"})).await.0, 200);
    for (user, space) in [("bob2", "gym"), ("eve", "gym"), ("cid2", "gym")] {
        assert_eq!(get(&t, "/v1/invitations", user).await.1, json!({"invitations": []}), "{user}'s is withdrawn");
        let (status, body) = accept(&t, user, space).await;
        assert_eq!((status, error_code(&body)), (404, "not_found"), "{user}: {body}");
    }
    assert_eq!(accept(&t, "ann", "gym").await, (200, json!({"space": "gym", "role": "viewer"})), "alice's stands");
    let (_, members) = get(&t, "/v1/spaces/members?space=gym", "alice").await;
    let users: Vec<&str> = members["members"].as_array().unwrap().iter().map(|m| m["user"].as_str().unwrap()).collect();
    assert_eq!(users, ["alice", "ann", "bob"]);

    // As an older server left it: an invitation whose inviter is an owner no more.
    invite(&t, "alice", "gym", "bob", json!("owner")).await;
    invite(&t, "bob", "gym", "bob3", json!("owner")).await;
    let demote = "UPDATE members SET role = 'editor' WHERE space_id = 'gym' AND user_id = 'bob'";
    if t.database.starts_with("sqlite") {
        let mut db = <sqlx::SqliteConnection as sqlx::Connection>::connect(&t.database).await.unwrap();
        sqlx::query(demote).execute(&mut db).await.unwrap();
    } else {
        let mut db = <sqlx::PgConnection as sqlx::Connection>::connect(&t.database).await.unwrap();
        sqlx::query(demote).execute(&mut db).await.unwrap();
    }
    assert_eq!(get(&t, "/v1/invitations", "bob3").await.1["invitations"].as_array().unwrap().len(), 1);
    assert_eq!(accept(&t, "bob3", "gym").await.0, 404, "its inviter is an owner no more");
    assert_eq!(get(&t, "/v1/invitations", "bob3").await.1, json!({"invitations": []}), "and it is gone");
    t.stop().await;
}
both!(an_invitation_lapses_with_its_inviters_ownership);

/// A space's owners see what is pending: who is invited, as what, by whom,
/// until when — a page at a time, by invitee. Only owners, who send and
/// withdraw invitations (an editor, a viewer, an invitee, a stranger and a
/// space that does not exist: the same 403); the admin sees any space's.
/// A withdrawn, declined, accepted or lapsed invitation is no longer listed.
async fn owners_list_a_spaces_pending_invitations(b: Backend) {
    let admin = "an-admin-token-of-at-least-32-characters";
    let Some(t) = server_with(b, |c| {
        c.invitation_ttl_ms = 60_000;
        c.admin_token = Some(admin.into());
    })
    .await
    else {
        return;
    };
    post(&t, "/v1/spaces", "alice", json!({"space": "team"})).await;
    post(&t, "/v1/spaces", "zed", json!({"space": "other"})).await;
    invite(&t, "alice", "team", "bob", json!("owner")).await;
    accept(&t, "bob", "team").await;
    invite(&t, "alice", "team", "ed", json!("editor")).await;
    accept(&t, "ed", "team").await;
    invite(&t, "alice", "team", "u1", json!("viewer")).await;
    invite(&t, "bob", "team", "u2", json!("editor")).await;
    invite(&t, "alice", "team", "u3", json!("owner")).await;
    invite(&t, "zed", "other", "u1", json!("viewer")).await;
    let listed = |b: &Value| -> Vec<(String, String, String)> {
        b["invitations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| {
                assert_eq!(i["space"], "team", "{i}");
                assert!(i["expiresAt"].as_u64().unwrap() > 1_700_000_000_000, "{i}");
                let s = |k: &str| i[k].as_str().unwrap().to_owned();
                (s("user"), s("role"), s("from"))
            })
            .collect()
    };
    let t3 = |u: &str, r: &str, f: &str| (u.to_owned(), r.to_owned(), f.to_owned());
    for owner in ["alice", "bob"] {
        let (status, body) = get(&t, "/v1/spaces/invitations?space=team", owner).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(
            listed(&body),
            [t3("u1", "viewer", "alice"), t3("u2", "editor", "bob"), t3("u3", "owner", "alice")],
            "{owner} sees every pending one, by invitee, and nothing of another space"
        );
    }
    let (_, first) = get(&t, "/v1/spaces/invitations?space=team&limit=2", "alice").await;
    assert_eq!(listed(&first).len(), 2);
    let (_, rest) = get(&t, "/v1/spaces/invitations?space=team&limit=2&after=u2", "alice").await;
    assert_eq!(listed(&rest), [t3("u3", "owner", "alice")]);
    assert_eq!(get(&t, "/v1/spaces/invitations?space=team&limit=0", "alice").await.0, 400);
    assert_eq!(get(&t, "/v1/spaces/invitations", "alice").await.0, 400, "space is required");

    for (user, space) in [("ed", "team"), ("u1", "team"), ("zed", "team"), ("alice", "nowhere"), ("alice", "other")] {
        let (status, body) = get(&t, &format!("/v1/spaces/invitations?space={space}"), user).await;
        assert_eq!((status, error_code(&body)), (403, "forbidden"), "{user} on {space}: {body}");
        assert_eq!(body["error"]["message"], format!("you are not an owner of space {space}"));
    }

    // The invitee's own listing, as before: the spaces, not their own name again.
    let (_, mine) = get(&t, "/v1/invitations", "u1").await;
    let keys: Vec<Vec<&String>> =
        mine["invitations"].as_array().unwrap().iter().map(|i| i.as_object().unwrap().keys().collect()).collect();
    assert_eq!(keys, [["expiresAt", "from", "role", "space"], ["expiresAt", "from", "role", "space"]]);

    // Withdrawn, declined, accepted: no longer pending.
    invite(&t, "alice", "team", "u1", Value::Null).await;
    post(&t, "/v1/invitations/decline", "u2", json!({"space": "team"})).await;
    accept(&t, "u3", "team").await;
    assert_eq!(get(&t, "/v1/spaces/invitations?space=team", "alice").await.1, json!({"invitations": []}));

    invite(&t, "alice", "team", "u4", json!("viewer")).await;
    let r = t.http.get(t.url("/v1/admin/spaces/invitations?space=team")).bearer_auth(admin).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(listed(&r.json().await.unwrap()), [t3("u4", "viewer", "alice")], "the admin sees any space's");
    let r = t.http.get(t.url("/v1/admin/spaces/invitations?space=nowhere")).bearer_auth(admin).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 404);
    t.stop().await;
}
both!(owners_list_a_spaces_pending_invitations);

/// Invitations lapse after `--invitation-ttl-ms`; pending ones are capped
/// per inviter and per invitee (`409 conflict`, naming the flag); sending
/// a pending invitation again is not counted twice, and a lapsed one frees its place.
async fn invitations_lapse_and_are_capped(b: Backend) {
    let Some(t) = server_with(b, |c| {
        c.invitation_ttl_ms = 1500;
        c.max_invitations_per_inviter = 3;
        c.max_invitations_per_user = 2;
    })
    .await
    else {
        return;
    };
    for s in ["s1", "s2", "s3", "s4"] {
        post(&t, "/v1/spaces", "alice", json!({"space": s})).await;
        post(&t, "/v1/spaces", "mallory", json!({"space": format!("m-{s}")})).await;
    }
    assert_eq!(invite(&t, "alice", "s1", "vic", json!("viewer")).await.0, 200);
    assert_eq!(invite(&t, "alice", "s1", "vic", json!("editor")).await.0, 200, "again: a refresh");
    assert_eq!(invite(&t, "mallory", "m-s1", "vic", json!("viewer")).await.0, 200);
    let (status, body) = invite(&t, "mallory", "m-s2", "vic", json!("viewer")).await;
    assert_eq!((status, error_code(&body)), (409, "conflict"));
    assert!(body["error"]["message"].as_str().unwrap().contains("--max-invitations-per-user"), "{body}");
    assert_eq!(invite(&t, "alice", "s2", "ann", json!("viewer")).await.0, 200);
    assert_eq!(invite(&t, "alice", "s3", "ann", json!("viewer")).await.0, 200);
    let (status, body) = invite(&t, "alice", "s4", "bea", json!("viewer")).await;
    assert_eq!((status, error_code(&body)), (409, "conflict"));
    assert!(body["error"]["message"].as_str().unwrap().contains("--max-invitations-per-inviter"), "{body}");

    tokio::time::sleep(Duration::from_millis(1600)).await;
    assert_eq!(get(&t, "/v1/invitations", "vic").await.1, json!({"invitations": []}), "lapsed");
    assert_eq!(accept(&t, "vic", "s1").await.0, 404, "a lapsed invitation cannot be accepted");
    assert_eq!(invite(&t, "alice", "s4", "bea", json!("viewer")).await.0, 200, "lapsed ones free their place");
    assert_eq!(invite(&t, "mallory", "m-s2", "vic", json!("viewer")).await.0, 200);
    t.stop().await;
}
both!(invitations_lapse_and_are_capped);

/// The caps hold under requests about different spaces at once: each is
/// counted under the lock of the user it bounds, not only of the space
/// changed (on PostgreSQL, a dozen invitations at once to a user capped
/// at 5 left more than 5 pending; a user capped at 5 spaces made more).
/// A dozen at once: under the cap of one user's requests in progress.
async fn caps_hold_under_requests_about_many_spaces_at_once(b: Backend) {
    let Some(t) = server_with(b, |c| {
        c.max_invitations_per_user = 5;
        c.max_owned_spaces_per_user = 5;
        c.max_spaces_per_user = 5;
    })
    .await
    else {
        return;
    };
    for i in 0..12 {
        assert_eq!(post(&t, "/v1/spaces", &format!("inviter{i}"), json!({"space": format!("c{i}")})).await.0, 200);
    }
    let invites = (0..12).map(|i| {
        let t = &t;
        async move { invite(t, &format!("inviter{i}"), &format!("c{i}"), "vic", json!("viewer")).await.0 }
    });
    let statuses = futures_util::future::join_all(invites).await;
    assert_eq!(statuses.iter().filter(|s| **s == 200).count(), 5, "{statuses:?}");
    assert_eq!(get(&t, "/v1/invitations", "vic").await.1["invitations"].as_array().unwrap().len(), 5);
    let accepts = (0..12).map(|i| {
        let t = &t;
        async move { accept(t, "vic", &format!("c{i}")).await.0 }
    });
    let statuses = futures_util::future::join_all(accepts).await;
    assert_eq!(statuses.iter().filter(|s| **s == 200).count(), 5, "{statuses:?}");
    assert_eq!(get(&t, "/v1/spaces", "vic").await.1["spaces"].as_array().unwrap().len(), 1 + 5, "personal + 5");
    let creates = (0..12).map(|i| {
        let t = &t;
        async move { post(t, "/v1/spaces", "maker", json!({"space": format!("made{i}")})).await.0 }
    });
    let statuses = futures_util::future::join_all(creates).await;
    assert_eq!(statuses.iter().filter(|s| **s == 200).count(), 5, "{statuses:?}");
    t.stop().await;
}
both!(caps_hold_under_requests_about_many_spaces_at_once);

/// The bounds of spaces: owned per user, member of per user (the admin's
/// direct adds too), members per space — each a `409 conflict` naming its flag.
async fn spaces_and_members_are_capped(b: Backend) {
    let Some(t) = server_with(b, |c| {
        c.max_owned_spaces_per_user = 2;
        c.max_spaces_per_user = 3;
        c.max_members_per_space = 2;
        c.admin_token = Some("an-admin-token-of-at-least-32-characters".into());
    })
    .await
    else {
        return;
    };
    assert_eq!(post(&t, "/v1/spaces", "own", json!({"space": "o1"})).await.0, 200);
    assert_eq!(post(&t, "/v1/spaces", "own", json!({"space": "o2"})).await.0, 200);
    let (status, body) = post(&t, "/v1/spaces", "own", json!({"space": "o3"})).await;
    assert_eq!((status, error_code(&body)), (409, "conflict"));
    assert!(body["error"]["message"].as_str().unwrap().contains("--max-owned-spaces-per-user"), "{body}");

    invite(&t, "own", "o1", "m", json!("viewer")).await;
    assert_eq!(accept(&t, "m", "o1").await.0, 200);
    let (status, body) = invite(&t, "own", "o1", "n", json!("viewer")).await;
    assert_eq!((status, error_code(&body)), (409, "conflict"), "o1 has its 2 members");
    assert!(body["error"]["message"].as_str().unwrap().contains("--max-members-per-space"), "{body}");

    for s in ["x1", "x2", "x3"] {
        post(&t, "/v1/spaces", &format!("owner-{s}"), json!({"space": s})).await;
        invite(&t, &format!("owner-{s}"), s, "m", json!("viewer")).await;
    }
    assert_eq!(accept(&t, "m", "x1").await.0, 200);
    assert_eq!(accept(&t, "m", "x2").await.0, 200);
    let (status, body) = accept(&t, "m", "x3").await;
    assert_eq!((status, error_code(&body)), (409, "conflict"), "m is in 3 spaces");
    assert!(body["error"]["message"].as_str().unwrap().contains("--max-spaces-per-user"), "{body}");
    let r = t
        .http
        .post(t.url("/v1/admin/spaces/members"))
        .bearer_auth("an-admin-token-of-at-least-32-characters")
        .json(&json!({"space": "x3", "user": "m", "role": "viewer"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 409, "the admin's direct add is bounded too");
    assert_eq!(get(&t, "/v1/spaces", "m").await.1["spaces"].as_array().unwrap().len(), 4, "personal + 3");
    // Made owner, or accepting an ownership offered, counts as creating
    // does: `own` owns 2 already (before: promotions passed the bound).
    for s in ["p1", "p2"] {
        assert_eq!(post(&t, "/v1/spaces", "giver", json!({"space": s})).await.0, 200);
    }
    invite(&t, "giver", "p2", "own", json!("owner")).await;
    let (status, body) = accept(&t, "own", "p2").await;
    assert_eq!((status, error_code(&body)), (409, "conflict"), "an ownership offered past the bound: {body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("--max-owned-spaces-per-user"), "{body}");
    invite(&t, "giver", "p1", "own", json!("viewer")).await;
    assert_eq!(accept(&t, "own", "p1").await.0, 200);
    let (status, body) = invite(&t, "giver", "p1", "own", json!("owner")).await;
    assert_eq!((status, error_code(&body)), (409, "conflict"), "a promotion past the bound: {body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("--max-owned-spaces-per-user"), "{body}");
    t.stop().await;
}
both!(spaces_and_members_are_capped);

/// A space's members and a user's spaces come in pages: `limit`, then `after` the last one.
async fn member_and_space_lists_are_paged(b: Backend) {
    let Some(t) = TestServer::new(b).await else { return };
    post(&t, "/v1/spaces", "own", json!({"space": "big"})).await;
    for i in 0..5 {
        let u = format!("u{i}");
        invite(&t, "own", "big", &u, json!("viewer")).await;
        accept(&t, &u, "big").await;
        post(&t, "/v1/spaces", "u0", json!({"space": format!("p{i}")})).await;
    }
    let users = |b: &Value| -> Vec<String> {
        b["members"].as_array().unwrap().iter().map(|m| m["user"].as_str().unwrap().to_owned()).collect()
    };
    let (_, first) = get(&t, "/v1/spaces/members?space=big&limit=2", "own").await;
    assert_eq!(users(&first), ["own", "u0"]);
    let (_, next) = get(&t, "/v1/spaces/members?space=big&limit=2&after=u0", "own").await;
    assert_eq!(users(&next), ["u1", "u2"]);
    let (_, last) = get(&t, "/v1/spaces/members?space=big&limit=10&after=u2", "own").await;
    assert_eq!(users(&last), ["u3", "u4"]);
    assert_eq!(get(&t, "/v1/spaces/members?space=big&limit=0", "own").await.0, 400);
    assert_eq!(get(&t, "/v1/spaces/members?space=big&limit=1001", "own").await.0, 400);

    let spaces = |b: &Value| -> Vec<String> {
        b["spaces"].as_array().unwrap().iter().map(|m| m["space"].as_str().unwrap().to_owned()).collect()
    };
    let (_, first) = get(&t, "/v1/spaces?limit=3", "u0").await;
    assert_eq!(spaces(&first), ["~u0", "big", "p0"]);
    let (_, next) = get(&t, "/v1/spaces?limit=3&after=p0", "u0").await;
    assert_eq!(spaces(&next), ["p1", "p2", "p3"]);
    assert_eq!(spaces(&get(&t, "/v1/spaces?after=p3", "u0").await.1), ["p4"]);
    t.stop().await;
}
both!(member_and_space_lists_are_paged);

/// A members listing is a read: while a push holds the space's lock (and,
/// on SQLite, the one write connection), listings answer at once.
async fn a_members_listing_never_waits_for_a_write(b: Backend) {
    let Some(t) = TestServer::new(b).await else { return };
    post(&t, "/v1/spaces", "own", json!({"space": "busy"})).await;
    assert_eq!(t.faults(json!({"delayMs": 2000})).await, 200);
    let (http, url) = (t.http.clone(), t.url("/v1/push"));
    let push = tokio::spawn(async move {
        let batch = [in_space("busy", full("o:1", "r", 1, 1))];
        http.post(&url).bearer_auth("dev:own").json(&json!({"attemptKey": "o:a", "batch": batch})).send().await.unwrap()
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    for _ in 0..4 {
        assert_eq!(get(&t, "/v1/spaces/members?space=busy", "own").await.0, 200);
    }
    let took = started.elapsed();
    assert!(took < Duration::from_millis(1000), "listings waited for the push: {took:?}");
    assert_eq!(push.await.unwrap().status().as_u16(), 200);
    t.faults(json!({"delayMs": 0})).await;
    t.stop().await;
}
both!(a_members_listing_never_waits_for_a_write);

/// A device in the most spaces a user may be in follows them all and
/// converges in a bounded number of pulls: no space is read again from its
/// start, and the server refuses to put the user in one more.
async fn a_user_at_the_spaces_cap_converges_in_bounded_pulls(b: Backend) {
    const SPACES: usize = 40;
    let Some(t) = server_with(b, |c| {
        c.max_spaces_per_user = SPACES;
        c.max_owned_spaces_per_user = 0;
    })
    .await
    else {
        return;
    };
    for i in 0..=SPACES {
        let (s, own) = (format!("s{i:02}"), format!("own{}", i % 2));
        assert_eq!(post(&t, "/v1/spaces", &own, json!({"space": s})).await.0, 200);
        let batch: Vec<Value> =
            (0..5).map(|r| in_space(&s, full(&format!("o:{i}:{r}"), &format!("r{r}"), 1, 1))).collect();
        t.push_ok(&own, &batch).await;
        assert_eq!(invite(&t, &own, &s, "vic", json!("viewer")).await.0, 200);
    }
    for i in 0..SPACES {
        assert_eq!(accept(&t, "vic", &format!("s{i:02}")).await.0, 200);
    }
    assert_eq!(accept(&t, "vic", &format!("s{SPACES:02}")).await.0, 409, "one more than the cap");
    // The device follows as the protocol says, 7 changes a pull.
    let mut follows = serde_json::Map::new();
    let mut rows = 0;
    let mut pulls = 0;
    loop {
        pulls += 1;
        let (status, page) = post(&t, "/v1/pull", "vic", json!({"spaces": follows, "limit": 7})).await;
        assert_eq!(status, 200, "{page}");
        for j in page["joined"].as_array().unwrap() {
            follows.insert(j["space"].as_str().unwrap().into(), json!({"cursor": 0, "role": j["role"]}));
        }
        for p in page["spaces"].as_array().unwrap() {
            rows += p["changes"].as_array().unwrap().len();
            let f = follows.get_mut(p["space"].as_str().unwrap()).unwrap();
            f["cursor"] = p["cursor"].clone();
        }
        if page["hasMore"] == false {
            break;
        }
        assert!(pulls < 100, "the sync never finishes");
    }
    assert_eq!(rows, SPACES * 5, "every row once");
    assert!(pulls <= (SPACES * 5).div_ceil(7) + 1, "{pulls} pulls");
    t.stop().await;
}
both!(a_user_at_the_spaces_cap_converges_in_bounded_pulls);
