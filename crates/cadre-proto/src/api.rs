//! The REST API's bodies (see the controller's OpenAPI document at /api/v1/openapi.json).
