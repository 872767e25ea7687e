"""What each gRPC method needs: the token's kind and the least user role. The gRPC server and the console
process ask the same table."""

from __future__ import annotations

from controlplane.api.auth import Permission

USER = Permission("user")
ADMIN = Permission("user", "admin")
PERMISSIONS: dict[str, Permission] = {
    "/drover.v1.AgentService/Connect": Permission("agent"),
    "/drover.v1.AgentService/ReserveModelCall": Permission("agent"),
    "/drover.v1.AgentService/SettleModelCall": Permission("agent"),
    "/drover.v1.AgentService/PublishChangeSet": Permission("agent"),
    "/drover.v1.AgentService/AskQuestion": Permission("agent"),
    "/drover.v1.ChangeService/SubmitChange": Permission("user", "submit"),
    "/drover.v1.ChangeService/GetChange": USER,
    "/drover.v1.ChangeService/ListChanges": USER,
    "/drover.v1.ChangeService/WatchChange": USER,
    "/drover.v1.ChangeService/CancelChange": Permission("user", "submit"),
    "/drover.v1.ChangeService/ListChangeSets": USER,
    "/drover.v1.ChangeService/GetPatch": USER,
    "/drover.v1.ChangeService/RaiseBudget": Permission("user", "submit"),
    "/drover.v1.ChangeService/RetryTask": Permission("user", "submit"),
    "/drover.v1.ChangeService/AmendChange": Permission("user", "submit"),
    "/drover.v1.ChangeService/GetSpend": USER,
    "/drover.v1.OperationsService/ListAgents": USER,
    "/drover.v1.OperationsService/DrainAgent": Permission("user", "admin"),
    "/drover.v1.OperationsService/UndrainAgent": Permission("user", "admin"),
    "/drover.v1.OperationsService/ListRuns": USER,
    "/drover.v1.OperationsService/GetRun": USER,
    "/drover.v1.OperationsService/CancelRun": Permission("user", "run.manage"),
    "/drover.v1.OperationsService/TailRunLogs": USER,
    "/drover.v1.OperationsService/ListEvents": USER,
    "/drover.v1.OperationsService/GetUsage": USER,
    # A fleet meter or a user's: an admin for every project; a project's: an admin of the project.
    "/drover.v1.OperationsService/RaiseMeter": ADMIN,
    "/drover.v1.OperationsService/ListReceipts": USER,
    "/drover.v1.OperationsService/ListClaims": USER,
    "/drover.v1.OperationsService/GetPacket": USER,
    "/drover.v1.OperationsService/SendInput": Permission("user", "run.manage"),
    "/drover.v1.OperationsService/ListInputs": USER,
    "/drover.v1.OperationsService/ListQuestions": USER,
    "/drover.v1.OperationsService/AnswerQuestion": Permission("user", "submit"),
    "/drover.v1.OperationsService/ListNotificationDeliveries": Permission("user", "run.manage"),
    # Projects: any user token reads the projects it may use; changing them is the admin role's, and the
    # service refuses a scoped token what lies outside its projects (creating, deleting: unscoped only).
    "/drover.v1.ProjectService/CreateProject": ADMIN,
    "/drover.v1.ProjectService/UpdateProject": ADMIN,
    "/drover.v1.ProjectService/GetProject": USER,
    "/drover.v1.ProjectService/ListProjects": USER,
    "/drover.v1.ProjectService/DeleteProject": ADMIN,
    "/drover.v1.ProjectService/SetGitCredential": ADMIN,
    "/drover.v1.ProjectService/DeleteGitCredential": ADMIN,
    "/drover.v1.ProjectService/SetForgeCredential": ADMIN,
    "/drover.v1.ProjectService/DeleteForgeCredential": ADMIN,
    "/drover.v1.ProjectService/RotateWebhookSecret": ADMIN,
    "/drover.v1.TokenService/CreateToken": ADMIN,
    "/drover.v1.TokenService/ListTokens": ADMIN,
    "/drover.v1.TokenService/RevokeToken": ADMIN,
}
