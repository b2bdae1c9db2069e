//! A bound on the silence inside an answer. The whole-request timeout ends when the
//! server's headers arrive; a server stopped (paused, overloaded) after its headers and
//! before the end of its body would otherwise hold a read or a write's answer forever,
//! and `tether apply` with it. So every body but a stream's must keep moving: no frame
//! for the request timeout ends it with an error. A watch (`watch=true`) and a followed
//! log (`follow=true`) are streams that may rightly idle for minutes, and are left alone.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use http_body_util::combinators::UnsyncBoxBody;
use tower::BoxError;
use tower_http::timeout::TimeoutBody;

/// Wraps a service so that its answers' bodies (a stream's aside) end in an error after
/// `idle` without a frame.
#[derive(Clone, Copy)]
pub(super) struct BodyTimeoutLayer(pub(super) Duration);

impl<S> tower::Layer<S> for BodyTimeoutLayer {
    type Service = BodyTimeout<S>;

    fn layer(&self, inner: S) -> BodyTimeout<S> {
        BodyTimeout {
            inner,
            idle: self.0,
        }
    }
}

#[derive(Clone)]
pub(super) struct BodyTimeout<S> {
    inner: S,
    idle: Duration,
}

impl<S, Req, B> tower::Service<http::Request<Req>> for BodyTimeout<S>
where
    S: tower::Service<http::Request<Req>, Response = http::Response<B>>,
    S::Future: Send + 'static,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Response = http::Response<UnsyncBoxBody<Bytes, BoxError>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Req>) -> Self::Future {
        let idle = (!is_stream(request.uri())).then_some(self.idle);
        let answer = self.inner.call(request);
        Box::pin(async move {
            let response = answer.await?;
            Ok(response.map(|body| match idle {
                Some(idle) => TimeoutBody::new(idle, body).boxed_unsync(),
                None => body.map_err(Into::into).boxed_unsync(),
            }))
        })
    }
}

/// Whether `uri` asks for a stream: a watch or a followed log.
fn is_stream(uri: &http::Uri) -> bool {
    uri.query().is_some_and(|query| {
        query
            .split('&')
            .any(|pair| matches!(pair, "watch=true" | "watch=1" | "follow=true" | "follow=1"))
    })
}

#[cfg(test)]
mod tests {
    use super::is_stream;

    #[test]
    fn watches_and_followed_logs_are_streams_and_nothing_else_is() {
        let cases = [
            (
                "/api/v1/namespaces/a/configmaps?watch=true&resourceVersion=1",
                true,
            ),
            ("/api/v1/pods?labelSelector=a&watch=1", true),
            ("/api/v1/namespaces/a/pods/p/log?follow=true", true),
            ("/api/v1/namespaces/a/configmaps", false),
            (
                "/api/v1/namespaces/a/configmaps?fieldManager=tether&watch=false",
                false,
            ),
            ("/apis/apps/v1/namespaces/a/deployments/watch", false),
            ("/api/v1/namespaces/a/pods/p/log?container=c", false),
        ];
        for (uri, stream) in cases {
            let uri: http::Uri = uri.parse().unwrap();
            assert_eq!(is_stream(&uri), stream, "{uri}");
        }
    }
}
