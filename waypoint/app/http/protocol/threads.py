from fastapi import APIRouter

router = APIRouter(tags=["agent protocol"])
